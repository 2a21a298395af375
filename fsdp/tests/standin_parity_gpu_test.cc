// One GPU standing in for S > 1 (tag "gpu"): the FSDP engine's CUDA path at shard degree 2 and 4
// (FULL_SHARD) and 2 x 2 (HYBRID_SHARD), its ranks threads of this process on one GPU connected
// by StandInCommunicators (fsdp/testing/standin_communicator.h: NCCL's stream protocol, a delay
// kernel before every collective's copies, issuing that never blocks the host, so LibTorch's one
// autograd thread per device serves every rank's backward). Every rank trains on the same batch
// ("identical ranks"), so with the stand-in's exact reductions each run must equal the W = 1 run
// bit for bit: losses, gradient norms (up to float64 summation order) and final parameters. A
// consumer not ordered after a collective (a missing stream wait, a buffer freed too early)
// reads stale data behind the delay kernel and breaks the equality.
#include <stdlib.h>

#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "absl/strings/str_cat.h"
#include "fsdp/layout.h"
#include "fsdp/testing/standin_communicator.h"
#include "fsdp/tests/parity.h"
#include "gtest/gtest.h"

namespace shardline::fsdp::testing {
namespace {

const at::Device kCuda(at::kCUDA, 0);

class StandInParityGpuTest : public ::testing::TestWithParam<ParityConfig> {
 protected:
  void SetUp() override {
    if (c10::cuda::device_count() == 0) GTEST_SKIP() << "no GPU";
    // Every "rank" must compute exactly what the W = 1 run computes: deterministic kernels
    // (cuBLAS needs a fixed workspace, set before its first handle).
    setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
    at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/true);
  }
};

// The W = R x S ranks of `config` on threads, each on its own stream.
std::vector<absl::StatusOr<ParityResult>> RunStandIn(const ParityConfig& config,
                                                     int64_t* flag_waits) {
  const int w = config.world_size;
  absl::StatusOr<ParallelLayout> layout =
      ParallelLayout::ForShape(w, config.hybrid_shard_degree > 0 ? config.hybrid_shard_degree : w);
  EXPECT_TRUE(layout.ok()) << layout.status();
  if (!layout.ok()) return {};
  const int s = layout->shard_degree();
  const int r = layout->replicate_degree();
  std::vector<std::vector<std::unique_ptr<StandInCommunicator>>> shard_groups, replicate_groups;
  for (int g = 0; g < r && s > 1; ++g) {
    auto group = StandInCommunicator::MakeGroup(absl::StrCat("shard[", g, "]"), s);
    EXPECT_TRUE(group.ok()) << group.status();
    if (!group.ok()) return {};
    shard_groups.push_back(std::move(*group));
  }
  for (int j = 0; j < s && r > 1; ++j) {
    auto group = StandInCommunicator::MakeGroup(absl::StrCat("replicate[", j, "]"), r);
    EXPECT_TRUE(group.ok()) << group.status();
    if (!group.ok()) return {};
    replicate_groups.push_back(std::move(*group));
  }
  std::vector<absl::StatusOr<ParityResult>> results(w, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < w; ++rank) {
    threads.emplace_back([&, rank] {
      c10::cuda::CUDAStreamGuard stream(c10::cuda::getStreamFromPool(false, 0));
      const int g = layout->ReplicateIndex(rank), j = layout->ShardIndex(rank);
      Communicator* shard = s > 1 ? shard_groups[g][j].get() : nullptr;
      Communicator* replicate = r > 1 ? replicate_groups[j][g].get() : nullptr;
      results[rank] = RunFsdpRank(config, rank, shard, replicate);
    });
  }
  for (auto& t : threads) t.join();
  *flag_waits = 0;
  for (auto* groups : {&shard_groups, &replicate_groups}) {
    for (auto& group : *groups) {
      for (auto& c : group) *flag_waits += c->flag_waits();
    }
  }
  return results;
}

TEST_P(StandInParityGpuTest, IdenticalRanksEqualTheOneRankRunBitForBit) {
  const ParityConfig& config = GetParam();
  ParityConfig one = config;
  one.world_size = 1;
  one.hybrid_shard_degree = 0;
  one.strategy = "FULL_SHARD";
  absl::StatusOr<ParityResult> reference = RunFsdpRank(one, 0, nullptr, nullptr);
  ASSERT_TRUE(reference.ok()) << reference.status();
  int64_t flag_waits = 0;
  std::vector<absl::StatusOr<ParityResult>> ranks = RunStandIn(config, &flag_waits);
  ASSERT_EQ(ranks.size(), static_cast<size_t>(config.world_size));
  for (int rank = 0; rank < config.world_size; ++rank) {
    ASSERT_TRUE(ranks[rank].ok()) << "rank " << rank << ": " << ranks[rank].status();
    EXPECT_EQ(ranks[rank]->losses, reference->losses) << "rank " << rank;
    ASSERT_EQ(ranks[rank]->grad_norms.size(), reference->grad_norms.size());
    for (size_t i = 0; i < reference->grad_norms.size(); ++i) {
      EXPECT_NEAR(ranks[rank]->grad_norms[i], reference->grad_norms[i],
                  1e-12 * reference->grad_norms[i])
          << "rank " << rank << " step " << i;
    }
  }
  ASSERT_EQ(ranks[0]->params.size(), reference->params.size());
  for (const auto& [name, t] : reference->params) {
    ASSERT_TRUE(ranks[0]->params.count(name)) << name;
    EXPECT_TRUE(ranks[0]->params.at(name).cpu().equal(t.cpu())) << name;
  }
  // The protocol's deferred path ran (a rank waited before its peers had issued).
  RecordProperty("flag_waits", static_cast<int>(flag_waits));
}

ParityConfig Config(const std::string& strategy, int w, int s, int prefetch,
                    at::ScalarType dtype = at::kFloat, bool offload = false) {
  ParityConfig c;
  c.strategy = strategy;
  c.world_size = w;
  c.hybrid_shard_degree = s;
  c.prefetch = prefetch;
  c.param_dtype = dtype;
  c.reduce_dtype = dtype;
  c.cpu_offload = offload;
  c.device = kCuda;
  c.identical_ranks = true;
  c.steps = 8;
  c.global_batch = 4;
  return c;
}

INSTANTIATE_TEST_SUITE_P(
    Strategies, StandInParityGpuTest,
    ::testing::Values(Config("FULL_SHARD", 2, 0, 0), Config("FULL_SHARD", 4, 0, 1),
                      Config("FULL_SHARD", 4, 0, 2, at::kBFloat16),
                      Config("SHARD_GRAD_OP", 2, 0, 1), Config("HYBRID_SHARD", 4, 2, 1),
                      Config("HYBRID_SHARD", 4, 2, 0, at::kBFloat16),
                      Config("FULL_SHARD", 2, 0, 1, at::kFloat, /*offload=*/true)),
    [](const ::testing::TestParamInfo<ParityConfig>& info) {
      return absl::StrCat(info.param.strategy, "_W", info.param.world_size, "_S",
                          info.param.hybrid_shard_degree, "_p", info.param.prefetch, "_",
                          info.param.param_dtype == at::kBFloat16 ? "bf16" : "fp32",
                          info.param.cpu_offload ? "_offload" : "");
    });

}  // namespace
}  // namespace shardline::fsdp::testing
