// Replica-group fault tolerance on the engine (in process, ranks on threads): the communicator
// swap, dropping a failed step's gradients, the state digest and the heal broadcast
// (fsdp/replica_state.h).
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/utils.h>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/torch_status.h"
#include "fsdp/fsdp_engine.h"
#include "fsdp/layout.h"
#include "fsdp/local_communicator.h"
#include "fsdp/replica_state.h"
#include "fsdp/sharded_optimizer.h"
#include "fsdp/testing/in_process_communicator.h"
#include "fsdp/testing/tiny_gpt.h"
#include "fsdp/tests/inprocess_ranks.h"
#include "gtest/gtest.h"

namespace shardline::fsdp::testing {
namespace {

constexpr int kWorld = 4, kShard = 2;

TinyGpt SeededTinyGpt() {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  torch::manual_seed(1);
  return TinyGpt(TinyGptConfig());
}

struct Rank {
  TinyGpt model{nullptr};
  std::unique_ptr<FsdpEngine> engine;
  std::unique_ptr<ShardedOptimizer> optimizer;
};

absl::StatusOr<Rank> MakeRank(int rank, Communicator* shard, Communicator* replicate) {
  Rank r;
  r.model = SeededTinyGpt();
  ASSIGN_OR_RETURN(ParallelLayout layout, ParallelLayout::Create(kWorld, "HYBRID_SHARD", kShard));
  FsdpEngineOptions eo;
  eo.rank = rank;
  eo.wrap_policy.block_type = "Block";
  ASSIGN_OR_RETURN(r.engine, FsdpEngine::Create(r.model.ptr(), layout, shard, replicate, eo));
  ShardedOptimizerOptions oo;
  oo.lr = 1e-2;
  oo.fused = true;
  ASSIGN_OR_RETURN(r.optimizer, ShardedOptimizer::Create(r.engine.get(), oo));
  return r;
}

// One step on a batch drawn from `seed` (two micro-batches: no_sync, then sync).
absl::Status TrainStep(Rank& r, int64_t seed, bool step_optimizer = true) {
  at::Tensor batch =
      at::randint(0, 37, {4, 8}, at::make_generator<at::CPUGeneratorImpl>(seed), at::kLong);
  for (int m = 0; m < 2; ++m) {
    at::Tensor mb = batch.narrow(0, m * 2, 2);
    RETURN_IF_ERROR(r.engine->BeginForward());
    at::Tensor loss;
    RETURN_IF_ERROR(TorchCall("forward", [&] {
      loss = r.model->loss(mb.narrow(1, 0, 7), mb.narrow(1, 1, 7), r.engine.get());
    }));
    RETURN_IF_ERROR(r.engine->Backward(loss / 2, /*sync_gradients=*/m == 1));
  }
  if (!step_optimizer) return absl::OkStatus();
  return r.optimizer->Step().status();
}

TEST(ReplicaState, HealMakesAFreshReplicaBitIdenticalToTheSourceAndTrainingGoesOnTogether) {
  FakeWorld world(kWorld, kShard);
  std::vector<uint64_t> before(kWorld), healed(kWorld), after(kWorld);
  // DigestsAgree (the on-demand all-reduce check) before and after the heal.
  std::vector<int> agree_before(kWorld, -1), agree_healed(kWorld, -1);
  std::vector<std::vector<int64_t>> progress(kWorld);
  std::vector<int64_t> steps(kWorld);
  auto statuses = RunOnThreads(world, [&](int rank, Communicator* s, Communicator* rep) {
    ASSIGN_OR_RETURN(Rank r, MakeRank(rank, s, rep));
    // Each replica group alone (a replicate group of one): group 0 trains 3 steps, group 1
    // stays fresh (a replacement that just built its model).
    LocalCommunicator alone(absl::StrCat("replicate[", world.layout.ShardIndex(rank), "]"));
    RETURN_IF_ERROR(r.engine->SetCommunicators(s, &alone));
    const int group = world.layout.ReplicateIndex(rank);
    if (group == 0) {
      for (int step = 0; step < 3; ++step) RETURN_IF_ERROR(TrainStep(r, 100 + step));
    }
    ASSIGN_OR_RETURN(before[rank], StateDigest(*r.engine, r.optimizer.get()));
    // The new epoch: both groups again; group 0 is the heal source (replicate rank 0).
    RETURN_IF_ERROR(r.engine->SetCommunicators(s, rep));
    ASSIGN_OR_RETURN(bool agreed, DigestsAgree(*r.engine, before[rank]));
    agree_before[rank] = agreed;
    progress[rank] = group == 0 ? std::vector<int64_t>{3, 1, 12} : std::vector<int64_t>{0, 0, 0};
    RETURN_IF_ERROR(BroadcastReplicaState(*r.engine, r.optimizer.get(), rep, 0, &progress[rank]));
    steps[rank] = r.optimizer->step_count();
    ASSIGN_OR_RETURN(healed[rank], StateDigest(*r.engine, r.optimizer.get()));
    ASSIGN_OR_RETURN(agreed, DigestsAgree(*r.engine, healed[rank]));
    agree_healed[rank] = agreed;
    // Both groups train the next step together (gradients average over both) and stay equal.
    RETURN_IF_ERROR(TrainStep(r, 200 + group));
    ASSIGN_OR_RETURN(after[rank], StateDigest(*r.engine, r.optimizer.get()));
    return absl::OkStatus();
  });
  for (int r = 0; r < kWorld; ++r) ASSERT_TRUE(statuses[r].ok()) << "rank " << r << statuses[r];
  for (int shard = 0; shard < kShard; ++shard) {
    SCOPED_TRACE(absl::StrCat("shard ", shard));
    EXPECT_NE(before[shard], before[shard + kShard]);  // Trained vs fresh.
    EXPECT_EQ(healed[shard], before[shard]);           // The source is unchanged...
    EXPECT_EQ(healed[shard + kShard], before[shard]);  // ...and the replica is its copy.
    EXPECT_EQ(after[shard], after[shard + kShard]);
    EXPECT_NE(after[shard], healed[shard]);
  }
  EXPECT_NE(healed[0], healed[1]);  // Different shards, different digests.
  EXPECT_EQ(agree_before, (std::vector<int>{0, 0, 0, 0}));
  EXPECT_EQ(agree_healed, (std::vector<int>{1, 1, 1, 1}));
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_EQ(progress[r], (std::vector<int64_t>{3, 1, 12})) << "rank " << r;
    EXPECT_EQ(steps[r], 3) << "rank " << r;
  }
}

TEST(ReplicaState, DigestIsEqualOnReplicasAndDeterministic) {
  FakeWorld world(kWorld, kShard);
  std::vector<uint64_t> digest(kWorld), again(kWorld);
  auto statuses = RunOnThreads(world, [&](int rank, Communicator* s, Communicator* rep) {
    ASSIGN_OR_RETURN(Rank r, MakeRank(rank, s, rep));
    RETURN_IF_ERROR(TrainStep(r, 7 + rank));  // Different data per rank; averaged gradients.
    ASSIGN_OR_RETURN(digest[rank], StateDigest(*r.engine, r.optimizer.get()));
    ASSIGN_OR_RETURN(again[rank], StateDigest(*r.engine, r.optimizer.get()));
    return absl::OkStatus();
  });
  for (int r = 0; r < kWorld; ++r) ASSERT_TRUE(statuses[r].ok()) << "rank " << r << statuses[r];
  EXPECT_EQ(digest, again);
  EXPECT_EQ(digest[0], digest[2]);
  EXPECT_EQ(digest[1], digest[3]);
  EXPECT_NE(digest[0], digest[1]);
}

TEST(FsdpEngineSetCommunicators, RefusesPendingGradientsAndWrongSizesUntilDropped) {
  FakeWorld world(kWorld, kShard);
  std::vector<absl::Status> pending(kWorld), too_big(kWorld), bad_shard(kWorld);
  std::vector<double> grad_sum(kWorld, -1);
  auto statuses = RunOnThreads(world, [&](int rank, Communicator* s, Communicator* rep) {
    ASSIGN_OR_RETURN(Rank r, MakeRank(rank, s, rep));
    // A no_sync micro-batch leaves gradients pending: no swap until they are dropped.
    at::Tensor mb = at::randint(0, 37, {2, 8}, at::kLong);
    RETURN_IF_ERROR(r.engine->BeginForward());
    at::Tensor loss;
    RETURN_IF_ERROR(TorchCall("forward", [&] {
      loss = r.model->loss(mb.narrow(1, 0, 7), mb.narrow(1, 1, 7), r.engine.get());
    }));
    RETURN_IF_ERROR(r.engine->Backward(loss, /*sync_gradients=*/false));
    pending[rank] = r.engine->SetCommunicators(s, rep);
    r.engine->DropStepGradients();
    EXPECT_FALSE(r.engine->gradients_pending());
    double sum = 0;
    for (const auto& f : r.engine->flat_params()) {
      sum += f->shard_grad().abs().sum().item<double>();
      EXPECT_FALSE(f->full_grad_allocated());
    }
    grad_sum[rank] = sum;
    auto three = InProcessCommunicator::MakeGroup("replicate[x]", 3);
    too_big[rank] = r.engine->SetCommunicators(s, three[world.layout.ReplicateIndex(rank)].get());
    LocalCommunicator one("shard[x]");
    bad_shard[rank] = r.engine->SetCommunicators(&one, rep);
    RETURN_IF_ERROR(r.engine->SetCommunicators(s, rep));
    return TrainStep(r, 3);  // The engine still trains after the drop.
  });
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << "rank " << r << statuses[r];
    EXPECT_EQ(pending[r].code(), absl::StatusCode::kFailedPrecondition) << pending[r];
    EXPECT_EQ(pending[r].message(),
              "SetCommunicators: no_sync gradients are pending; call DropStepGradients first");
    EXPECT_EQ(too_big[r].code(), absl::StatusCode::kInvalidArgument) << too_big[r];
    EXPECT_EQ(bad_shard[r].code(), absl::StatusCode::kInvalidArgument) << bad_shard[r];
    EXPECT_EQ(grad_sum[r], 0.0);
  }
}

}  // namespace
}  // namespace shardline::fsdp::testing
