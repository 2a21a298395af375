// In-process tests of the FSDP engine: ranks are threads connected by InProcessCommunicators.
// Multi-process Gloo parity lives in fsdp_parity_test.cc.
#include <malloc.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <mutex>
#include <thread>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/utils.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/torch_status.h"
#include "fsdp/fsdp_engine.h"
#include "fsdp/layout.h"
#include "fsdp/local_communicator.h"
#include "fsdp/loss_scaler.h"
#include "fsdp/sharded_optimizer.h"
#include "fsdp/testing/in_process_communicator.h"
#include "fsdp/testing/tiny_gpt.h"
#include "fsdp/tests/inprocess_ranks.h"
#include "fsdp/tests/parity.h"
#include "gtest/gtest.h"

namespace shardline::fsdp::testing {
namespace {

// The same initial weights on every rank thread: the global RNG is seeded and read under one
// lock, so threads building their replicas at once do not interleave its draws.
TinyGpt SeededTinyGpt(const TinyGptConfig& config) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  torch::manual_seed(1);
  return TinyGpt(config);
}

int ShardDegree(const ParityConfig& c) {
  auto layout = ParallelLayout::Create(c.world_size, c.strategy, c.hybrid_shard_degree);
  EXPECT_TRUE(layout.ok()) << layout.status();
  return layout.ok() ? layout->shard_degree() : 1;
}

// Runs `c` on threads over InProcessCommunicators and returns every rank's result.
std::vector<ParityResult> RunRanks(const ParityConfig& c) {
  FakeWorld world(c.world_size, ShardDegree(c));
  std::vector<ParityResult> results(c.world_size);
  auto statuses = RunOnThreads(world, [&](int rank, Communicator* s, Communicator* r) {
    absl::StatusOr<ParityResult> res = RunFsdpRank(c, rank, s, r);
    if (!res.ok()) return res.status();
    results[rank] = std::move(*res);
    return absl::OkStatus();
  });
  for (int r = 0; r < c.world_size; ++r) EXPECT_TRUE(statuses[r].ok()) << statuses[r];
  return results;
}

void ExpectParity(const ParityConfig& c) {
  SCOPED_TRACE(c.Name());
  const ParityResult ref = RunReference(c);
  const std::vector<ParityResult> results = RunRanks(c);
  // A rank that failed (its status is reported above) has no losses: stop here.
  for (const ParityResult& r : results) ASSERT_EQ(r.losses.size(), static_cast<size_t>(c.steps));
  for (int step = 0; step < c.steps; ++step) {
    double mean = 0;
    for (const ParityResult& r : results) mean += r.losses[step];
    mean /= c.world_size;
    EXPECT_NEAR(mean, ref.losses[step], 1e-5 * std::abs(ref.losses[step])) << "step " << step;
    for (const ParityResult& r : results) {
      EXPECT_NEAR(r.grad_norms[step], ref.grad_norms[step], 1e-4 * ref.grad_norms[step])
          << "step " << step;
    }
  }
  ASSERT_FALSE(results[0].params.empty());
  for (const auto& [name, t] : results[0].params) {
    ASSERT_TRUE(ref.params.count(name)) << name;
    const double diff = (t - ref.params.at(name)).abs().max().item<double>();
    EXPECT_LE(diff, 1e-4) << name;
  }
  EXPECT_GT(ref.losses.front() - ref.losses.back(), 0.1) << "the model should learn";
}

TEST(FsdpEngine, FullShardMatchesUnshardedOnThreads) {
  ParityConfig c;
  c.world_size = 2;
  c.steps = 8;
  ExpectParity(c);
}

TEST(FsdpEngine, HybridShardMatchesUnshardedOnThreads) {
  ParityConfig c;
  c.strategy = "HYBRID_SHARD";
  c.world_size = 4;
  c.hybrid_shard_degree = 2;
  c.steps = 6;
  ExpectParity(c);
}

TEST(FsdpEngine, NoShardAndPerParameterWrapMatchOnThreads) {
  ParityConfig c;
  c.strategy = "NO_SHARD";
  c.world_size = 3;
  c.steps = 5;
  ExpectParity(c);
  c.strategy = "SHARD_GRAD_OP";
  c.wrap = WrapPolicyKind::kPerParameter;
  ExpectParity(c);
}

TEST(FsdpEngine, GradientAccumulationWithNoSyncMatchesOnThreads) {
  ParityConfig c;
  c.strategy = "HYBRID_SHARD_ZERO2";
  c.world_size = 4;
  c.hybrid_shard_degree = 2;
  c.micro_batches = 3;
  c.steps = 5;
  ExpectParity(c);
}

TEST(FsdpEngine, SgdMomentumAndSizeBasedWrapMatchOnThreads) {
  ParityConfig c;
  c.world_size = 3;
  c.sgd = true;
  c.wrap = WrapPolicyKind::kSizeBased;
  c.steps = 6;
  ExpectParity(c);
}

// Persistent state for FULL_SHARD + AdamW: params + grads + exp_avg + exp_avg_sq = 16 P / S
// bytes, plus padding.
TEST(FsdpEngine, AccountingShowsSixteenBytesPerParamOverS) {
  for (int s : {1, 2, 4}) {
    SCOPED_TRACE(s);
    ParityConfig c;
    c.world_size = s;
    c.strategy = s == 1 ? "NO_SHARD" : "FULL_SHARD";
    c.steps = 2;
    FakeWorld world(s, s);
    std::vector<int64_t> persistent(s), padding(s), params(s), peak(s), expected_peak(s);
    auto statuses = RunOnThreads(world, [&](int rank, Communicator* sh, Communicator* rep) {
      auto layout = ParallelLayout::Create(s, c.strategy, 0);
      if (!layout.ok()) return layout.status();
      torch::manual_seed(1);
      TinyGpt model{TinyGptConfig{}};
      FsdpEngineOptions eo;
      eo.rank = rank;
      auto engine = FsdpEngine::Create(model.ptr(), *layout, sh, rep, eo);
      if (!engine.ok()) return engine.status();
      auto opt = ShardedOptimizer::Create(engine->get(), ShardedOptimizerOptions{});
      if (!opt.ok()) return opt.status();
      at::Tensor idx = at::zeros({2, 8}, at::kLong);
      absl::Status st = (*engine)->BeginForward();
      if (!st.ok()) return st;
      at::Tensor loss = model->loss(idx, idx, engine->get());
      st = (*engine)->Backward(loss);
      if (!st.ok()) return st;
      auto norm = (*opt)->Step();
      if (!norm.ok()) return norm.status();
      MemoryStats m = (*engine)->memory_stats();
      persistent[rank] = PersistentStateBytes(**engine, **opt);
      padding[rank] = m.padding_bytes;
      params[rank] = m.num_params;
      peak[rank] = m.peak_gathered_param_bytes;
      // FULL_SHARD frees each block after its forward and after its backward: at most the
      // root unit plus the largest block are ever gathered at once.
      int64_t largest_block = 0;
      const auto& flats = (*engine)->flat_params();
      for (size_t i = 1; i < flats.size(); ++i) {
        largest_block = std::max(largest_block, flats[i]->padded_numel() * 4);
      }
      expected_peak[rank] = s == 1 ? 0 : flats[0]->padded_numel() * 4 + largest_block;
      EXPECT_EQ(m.gathered_param_bytes, 0);  // Everything freed after backward.
      EXPECT_EQ(m.unsharded_grad_bytes, 0);
      return absl::OkStatus();
    });
    for (const auto& st : statuses) ASSERT_TRUE(st.ok()) << st;
    for (int r = 0; r < s; ++r) {
      const double expected = 16.0 * params[r] / s;
      // Padding adds at most (S-1) elements per unit per tensor kind.
      EXPECT_NEAR(static_cast<double>(persistent[r]), expected, 0.02 * expected)
          << "rank " << r << " padding bytes " << padding[r];
      EXPECT_LE(persistent[r], expected + 4.0 * padding[r] + 16.0 * s * 4);
      EXPECT_EQ(peak[r], expected_peak[r]);
    }
    EXPECT_EQ(params[0], 16970);
  }
}

TEST(FsdpEngine, CommunicatorSizeNotMatchingLayoutIsInvalidArgument) {
  auto layout = ParallelLayout::Create(4, "HYBRID_SHARD", 2);
  ASSERT_TRUE(layout.ok());
  auto group = InProcessCommunicator::MakeGroup("shard[0]", 3);
  torch::manual_seed(1);
  TinyGpt model{TinyGptConfig{}};
  FsdpEngineOptions eo;
  auto engine = FsdpEngine::Create(model.ptr(), *layout, group[0].get(), nullptr, eo);
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(engine.status().message(), "shard communicator has 3 ranks"))
      << engine.status();
  EXPECT_TRUE(absl::StrContains(engine.status().message(), "S=2")) << engine.status();
}

TEST(FsdpEngine, UnknownStrategyAndBadDegreeAreInvalidArgument) {
  auto bad_name = ParallelLayout::Create(4, "FULLY_SHARDED", 0);
  ASSERT_FALSE(bad_name.ok());
  EXPECT_EQ(bad_name.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(bad_name.status().message(), "FULLY_SHARDED"));
  auto bad_degree = ParallelLayout::Create(6, "FULL_SHARD", 4);
  ASSERT_FALSE(bad_degree.ok());
  EXPECT_EQ(bad_degree.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(bad_degree.status().message(), "4"));
  EXPECT_TRUE(absl::StrContains(bad_degree.status().message(), "6"));
}

TEST(FsdpEngine, PrefetchChangesNothingNumericallyOnThreads) {
  for (int prefetch : {1, 2}) {
    ParityConfig c;
    c.world_size = 2;
    c.steps = 4;
    c.prefetch = prefetch;
    c.wrap = WrapPolicyKind::kPerLayer;  // Several units per hook group.
    ExpectParity(c);
  }
}

// Gradients take one reduction path (StartReduce / FinishOldestReduce); overlap_reduce only decides
// when a reduction is waited for, so losses, norms and parameters are bit-identical without it,
// for a reduce-scatter (FULL_SHARD), reduce-scatter + replicate all-reduce (HYBRID_SHARD) and the
// all-reduce alone (NO_SHARD), with no_sync micro-batches.
TEST(FsdpEngine, OverlapReduceChangesNothingNumerically) {
  struct Case {
    const char* strategy;
    int world, degree;
  };
  for (const Case& k :
       {Case{"FULL_SHARD", 2, 0}, Case{"HYBRID_SHARD", 4, 2}, Case{"NO_SHARD", 2, 0}}) {
    ParityConfig c;
    c.strategy = k.strategy;
    c.world_size = k.world;
    c.hybrid_shard_degree = k.degree;
    c.steps = 3;
    c.global_batch = 16;  // 2 micro-batches per rank at W = 2 and 4.
    c.micro_batches = 2;
    c.wrap = WrapPolicyKind::kPerLayer;  // Several reductions in flight per backward.
    SCOPED_TRACE(c.Name());
    const std::vector<ParityResult> overlapped = RunRanks(c);
    c.overlap_reduce = false;
    const std::vector<ParityResult> serial = RunRanks(c);
    ASSERT_EQ(overlapped.size(), serial.size());
    for (size_t r = 0; r < serial.size(); ++r) {
      ASSERT_EQ(serial[r].losses.size(), static_cast<size_t>(c.steps)) << "rank " << r;
      EXPECT_EQ(serial[r].losses, overlapped[r].losses) << "rank " << r;
      EXPECT_EQ(serial[r].grad_norms, overlapped[r].grad_norms) << "rank " << r;
      for (const auto& [name, t] : serial[r].params) {
        EXPECT_TRUE(at::equal(t, overlapped[r].params.at(name))) << name << " rank " << r;
      }
    }
  }
}

// Checkpoint-style resharding: 4 steps on W=2 FULL_SHARD, full state (parameters + optimizer)
// gathered, loaded into W=4 HYBRID_SHARD (S=2) with other units, 4 more steps: the result must
// match 8 uninterrupted unsharded steps.
TEST(FsdpEngine, FullStateMovesBetweenLayoutsAndTrainingContinuesExactly) {
  ParityConfig whole;
  whole.steps = 8;
  const ParityResult ref = RunReference(whole);

  ParityConfig first;
  first.world_size = 2;
  first.steps = 4;
  first.save_state = true;
  FakeWorld w1(2, 2);
  std::vector<ParityResult> r1(2);
  auto s1 = RunOnThreads(w1, [&](int rank, Communicator* s, Communicator* r) {
    auto res = RunFsdpRank(first, rank, s, r);
    if (!res.ok()) return res.status();
    r1[rank] = std::move(*res);
    return absl::OkStatus();
  });
  for (const auto& st : s1) ASSERT_TRUE(st.ok()) << st;
  ASSERT_EQ(r1[0].state.count("blocks.0.fc.weight.exp_avg_sq"), 1u);
  EXPECT_EQ(r1[1].state.at("step").item<int64_t>(), 4);

  ParityConfig second;
  second.strategy = "HYBRID_SHARD";
  second.world_size = 4;
  second.hybrid_shard_degree = 2;
  second.wrap = WrapPolicyKind::kPerLayer;  // Different units: resharding by name and range.
  second.start_step = 4;
  second.steps = 4;
  FakeWorld w2(4, 2);
  std::vector<ParityResult> r2(4);
  auto s2 = RunOnThreads(w2, [&](int rank, Communicator* s, Communicator* r) {
    // Rank k of each group of two resumes from the two-rank save's rank k.
    auto res = RunFsdpRank(second, rank, s, r, &r1[w2.layout.ShardIndex(rank)].state);
    if (!res.ok()) return res.status();
    r2[rank] = std::move(*res);
    return absl::OkStatus();
  });
  for (const auto& st : s2) ASSERT_TRUE(st.ok()) << st;
  for (int step = 0; step < 4; ++step) {
    double mean = 0;
    for (const ParityResult& r : r2) mean += r.losses[step] / 4;
    EXPECT_NEAR(mean, ref.losses[4 + step], 1e-5 * ref.losses[4 + step]) << step;
  }
  for (const auto& [name, t] : r2[0].params) {
    EXPECT_LE((t - ref.params.at(name)).abs().max().item<double>(), 1e-4) << name;
  }
}

// The collectives each strategy issues per step, counted on the fake communicators, so no
// strategy can silently run as another: FULL_SHARD / HYBRID_SHARD gather each block twice
// (forward and backward), SHARD_GRAD_OP / HYBRID_SHARD_ZERO2 once, NO_SHARD never; hybrid and
// NO_SHARD all-reduce every unit's gradient over the replicate group. Prefetch turns gathers
// asynchronous without adding any.
TEST(FsdpEngine, StrategiesIssueTheirScheduleOfCollectives) {
  struct Case {
    const char* strategy;
    int world, degree;
    bool prefetch;
    int64_t gathers_per_step;          // Shard group: root (1) + blocks.
    int64_t reduce_scatters_per_step;  // Shard group: one per unit.
    int64_t all_reduces_per_step;      // Replicate group: one per unit.
  };
  for (const Case& k : {Case{"FULL_SHARD", 2, 0, false, 1 + 2 * 2, 3, 0},
                        Case{"SHARD_GRAD_OP", 2, 0, false, 1 + 2, 3, 0},
                        Case{"FULL_SHARD", 2, 0, true, 1 + 2 * 2, 3, 0},
                        Case{"HYBRID_SHARD", 4, 2, false, 1 + 2 * 2, 3, 3},
                        Case{"HYBRID_SHARD_ZERO2", 4, 2, false, 1 + 2, 3, 3},
                        Case{"NO_SHARD", 2, 0, false, 0, 0, 3}}) {
    SCOPED_TRACE(absl::StrCat(k.strategy, " W", k.world, k.prefetch ? " prefetch" : ""));
    auto layout = ParallelLayout::Create(k.world, k.strategy, k.degree);
    ASSERT_TRUE(layout.ok()) << layout.status();
    FakeWorld world(k.world, layout->shard_degree());
    auto statuses = RunOnThreads(world, [&](int rank, Communicator* sh, Communicator* rep) {
      TinyGpt model = SeededTinyGpt(TinyGptConfig{});
      FsdpEngineOptions eo;
      eo.rank = rank;
      eo.sync_module_states = false;
      eo.forward_prefetch = k.prefetch;
      if (k.prefetch) eo.backward_prefetch = FsdpEngineOptions::BackwardPrefetch::kPre;
      auto engine = FsdpEngine::Create(model.ptr(), *layout, sh, rep, eo);
      if (!engine.ok()) return engine.status();
      auto* shard = static_cast<InProcessCommunicator*>(sh);
      auto* replicate = static_cast<InProcessCommunicator*>(rep);
      auto count = [](InProcessCommunicator* c, int what) -> int64_t {
        if (c == nullptr) return 0;
        return what == 0 ? c->all_gathers() : what == 1 ? c->reduce_scatters() : c->all_reduces();
      };
      at::Tensor idx = at::zeros({2, 8}, at::kLong);
      int64_t before[3] = {0, 0, 0};
      for (int step = 0; step < 2; ++step) {
        if (step == 1) {  // Count the second step (prefetch needs one forward to learn order).
          before[0] = count(shard, 0);
          before[1] = count(shard, 1);
          before[2] = count(replicate, 2);
        }
        absl::Status st = (*engine)->BeginForward();
        if (!st.ok()) return st;
        st = (*engine)->Backward(model->loss(idx, idx, engine->get()));
        if (!st.ok()) return st;
      }
      EXPECT_EQ(count(shard, 0) - before[0], k.gathers_per_step);
      EXPECT_EQ(count(shard, 1) - before[1], k.reduce_scatters_per_step);
      EXPECT_EQ(count(replicate, 2) - before[2], k.all_reduces_per_step);
      const int64_t async = shard == nullptr ? 0 : shard->async_calls();
      if (k.prefetch) {
        EXPECT_GE(async, 2);
      } else {
        EXPECT_EQ(async, 0);
      }
      return absl::OkStatus();
    });
    for (const auto& st : statuses) ASSERT_TRUE(st.ok()) << st;
  }
}

// Ranks that initialise differently end up with global rank 0's parameters and buffers.
TEST(FsdpEngine, WrapBroadcastsParametersAndBuffersFromRankZero) {
  const int w = 4;
  std::vector<TinyGpt> models(w, TinyGpt{nullptr});
  for (int r = 0; r < w; ++r) {
    torch::manual_seed(100 + r);
    models[r] = TinyGpt(TinyGptConfig{});
    if (r != 0) models[r]->mask.fill_(false);  // A buffer that differs.
  }
  std::map<std::string, at::Tensor> rank0;
  for (const auto& item : models[0]->named_parameters()) {
    rank0[item.key()] = item.value().detach().clone();
  }
  auto layout = ParallelLayout::Create(w, "HYBRID_SHARD", 2);
  ASSERT_TRUE(layout.ok());
  FakeWorld world(w, 2);
  std::vector<std::map<std::string, at::Tensor>> full(w);
  std::vector<std::unique_ptr<FsdpEngine>> engines(w);
  auto statuses = RunOnThreads(world, [&](int rank, Communicator* sh, Communicator* rep) {
    FsdpEngineOptions eo;
    eo.rank = rank;
    auto engine = FsdpEngine::Create(models[rank].ptr(), *layout, sh, rep, eo);
    if (!engine.ok()) return engine.status();
    auto state = (*engine)->FullParamState(/*rank0_only=*/false);
    if (!state.ok()) return state.status();
    for (auto& [n, t] : *state) full[rank][n] = t;
    engines[rank] = std::move(*engine);
    return absl::OkStatus();
  });
  for (const auto& st : statuses) ASSERT_TRUE(st.ok()) << st;
  for (int r = 0; r < w; ++r) {
    EXPECT_TRUE(at::equal(models[r]->mask, models[0]->mask)) << "rank " << r;
    EXPECT_EQ(models[r]->mask.sum().item<int64_t>(), 28);  // Strict upper triangle of 8x8.
    for (const auto& [name, t] : full[r]) {
      EXPECT_TRUE(at::equal(t, rank0.at(name))) << "rank " << r << " " << name;
    }
  }
}

// An eval forward (no grad) through the engine gives the unsharded model's output and leaves
// nothing gathered after ReshardAll, for a strategy that frees and one that keeps.
TEST(FsdpEngine, EvalForwardMatchesUnshardedAndFreesEverything) {
  torch::manual_seed(1);
  TinyGpt plain(TinyGptConfig{});
  at::Tensor idx = at::arange(16, at::kLong).remainder(37).view({2, 8});
  at::Tensor expected;
  {
    at::NoGradGuard no_grad;
    expected = plain->forward(idx, nullptr);
  }
  for (const char* strategy : {"FULL_SHARD", "SHARD_GRAD_OP"}) {
    SCOPED_TRACE(strategy);
    auto layout = ParallelLayout::Create(2, strategy, 0);
    FakeWorld world(2, 2);
    std::vector<TinyGpt> models(2, TinyGpt{nullptr});
    for (int r = 0; r < 2; ++r) {
      torch::manual_seed(1);
      models[r] = TinyGpt(TinyGptConfig{});
    }
    auto statuses = RunOnThreads(world, [&](int rank, Communicator* sh, Communicator* rep) {
      FsdpEngineOptions eo;
      eo.rank = rank;
      auto engine = FsdpEngine::Create(models[rank].ptr(), *layout, sh, rep, eo);
      if (!engine.ok()) return engine.status();
      for (int pass = 0; pass < 2; ++pass) {
        absl::Status st = (*engine)->BeginForward();
        if (!st.ok()) return st;
        at::Tensor logits;
        {
          at::NoGradGuard no_grad;
          logits = models[rank]->forward(idx, engine->get());
        }
        (*engine)->ReshardAll();
        EXPECT_LE((logits - expected).abs().max().item<double>(), 1e-5) << "pass " << pass;
        EXPECT_EQ((*engine)->memory_stats().gathered_param_bytes, 0);
      }
      return absl::OkStatus();
    });
    for (const auto& st : statuses) ASSERT_TRUE(st.ok()) << st;
  }
}

// no_sync gradients must be reduced before a step; a single-rank world needs no communicators.
TEST(FsdpEngine, StepWithUnreducedNoSyncGradientsIsFailedPrecondition) {
  auto layout = ParallelLayout::Create(1, "FULL_SHARD", 0);
  ASSERT_TRUE(layout.ok()) << layout.status();
  torch::manual_seed(1);
  TinyGpt model{TinyGptConfig{}};
  auto engine = FsdpEngine::Create(model.ptr(), *layout, nullptr, nullptr, FsdpEngineOptions{});
  ASSERT_TRUE(engine.ok()) << engine.status();
  auto opt = ShardedOptimizer::Create(engine->get(), ShardedOptimizerOptions{});
  ASSERT_TRUE(opt.ok()) << opt.status();
  at::Tensor idx = at::zeros({2, 8}, at::kLong);
  ASSERT_TRUE((*engine)->BeginForward().ok());
  ASSERT_TRUE((*engine)->Backward(model->loss(idx, idx, engine->get()), false).ok());
  auto step = (*opt)->Step();
  ASSERT_FALSE(step.ok());
  EXPECT_EQ(step.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(step.status().message(), "no_sync")) << step.status();
  ASSERT_TRUE((*engine)->BeginForward().ok());
  ASSERT_TRUE((*engine)->Backward(model->loss(idx, idx, engine->get()), true).ok());
  step = (*opt)->Step();
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_GT(*step, 0.0);
  // Optimizer options are validated with the option named.
  ShardedOptimizerOptions bad;
  bad.beta2 = 1.0;
  auto bad_opt = ShardedOptimizer::Create(engine->get(), bad);
  ASSERT_FALSE(bad_opt.ok());
  EXPECT_EQ(bad_opt.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(bad_opt.status().message(), "beta2")) << bad_opt.status();
}

// A communicator whose collectives succeed but which reports an error found after their Wait()
// returned, as NcclCommunicator's watchdog does (Communicator::AsyncError).
class LateFailingCommunicator : public LocalCommunicator {
 public:
  using LocalCommunicator::LocalCommunicator;
  absl::Status AsyncError() const override { return error; }
  absl::Status error;
};

TEST(FsdpEngine, CommunicatorErrorFoundAfterWaitFailsBackwardAndEveryLaterCall) {
  auto layout = ParallelLayout::Create(1, "FULL_SHARD", 0);
  ASSERT_TRUE(layout.ok()) << layout.status();
  LateFailingCommunicator shard("shard[0]");
  TinyGpt model = SeededTinyGpt(TinyGptConfig{});
  auto engine = FsdpEngine::Create(model.ptr(), *layout, &shard, nullptr, FsdpEngineOptions{});
  ASSERT_TRUE(engine.ok()) << engine.status();
  at::Tensor idx = at::zeros({2, 8}, at::kLong);
  ASSERT_TRUE((*engine)->BeginForward().ok());
  ASSERT_TRUE((*engine)->Backward(model->loss(idx, idx, engine->get())).ok());
  ASSERT_TRUE((*engine)->BeginForward().ok());
  at::Tensor loss = model->loss(idx, idx, engine->get());
  // The watchdog fails a reduction of this step after its Wait returned.
  shard.error = absl::DeadlineExceededError(
      "group shard[0] op reduce_scatter step 4: timed out after 1s (ranks 0,1)");
  const absl::Status backward = (*engine)->Backward(loss);
  EXPECT_EQ(backward, shard.error);
  EXPECT_EQ((*engine)->BeginForward(), shard.error);
}

// CUDA: Backward returns while its last reductions still run; the optimizer's read of the
// gradient norm waits for them (or for their watchdog's abort, which leaves the gradients
// undefined). A failure found by then fails the step before the update.
TEST(FsdpEngine, CommunicatorErrorFoundAfterBackwardFailsTheOptimizerStepBeforeTheUpdate) {
  auto layout = ParallelLayout::Create(1, "FULL_SHARD", 0);
  ASSERT_TRUE(layout.ok()) << layout.status();
  LateFailingCommunicator shard("shard[0]");
  TinyGpt model = SeededTinyGpt(TinyGptConfig{});
  auto engine = FsdpEngine::Create(model.ptr(), *layout, &shard, nullptr, FsdpEngineOptions{});
  ASSERT_TRUE(engine.ok()) << engine.status();
  auto opt = ShardedOptimizer::Create(engine->get(), ShardedOptimizerOptions{});
  ASSERT_TRUE(opt.ok()) << opt.status();
  at::Tensor idx = at::zeros({2, 8}, at::kLong);
  ASSERT_TRUE((*engine)->BeginForward().ok());
  ASSERT_TRUE((*engine)->Backward(model->loss(idx, idx, engine->get())).ok());
  std::vector<at::Tensor> before;
  for (const auto& f : (*engine)->flat_params()) before.push_back(f->shard().clone());
  shard.error = absl::DeadlineExceededError(
      "group shard[0] op reduce_scatter step 2: timed out after 1s (ranks 0,1)");
  absl::StatusOr<double> step = (*opt)->Step();
  EXPECT_EQ(step.status(), shard.error);
  for (size_t i = 0; i < before.size(); ++i) {
    EXPECT_TRUE((*engine)->flat_params()[i]->shard().equal(before[i])) << "unit " << i;
  }
}

TEST(FsdpEngine, CommunicatorErrorFoundAfterWaitFailsTheNextForward) {
  auto layout = ParallelLayout::Create(1, "FULL_SHARD", 0);
  ASSERT_TRUE(layout.ok()) << layout.status();
  LateFailingCommunicator shard("shard[0]");
  TinyGpt model = SeededTinyGpt(TinyGptConfig{});
  auto engine = FsdpEngine::Create(model.ptr(), *layout, &shard, nullptr, FsdpEngineOptions{});
  ASSERT_TRUE(engine.ok()) << engine.status();
  shard.error = absl::UnavailableError(
      "group shard[0] op all_gather step 9: lost a peer (ranks 0,1): NCCL error: remote process "
      "exited");
  EXPECT_EQ((*engine)->BeginForward(), shard.error);
  // The engine stays broken with that error even if the communicator's report changed.
  shard.error = absl::OkStatus();
  EXPECT_EQ((*engine)->BeginForward().code(), absl::StatusCode::kUnavailable);
}

// A rank that stops participating makes the others fail with DEADLINE_EXCEEDED naming the
// group, the operation and the step.
TEST(FsdpEngine, PeerThatStopsMakesOthersFailWithTimeout) {
  auto layout = ParallelLayout::Create(2, "FULL_SHARD", 0);
  ASSERT_TRUE(layout.ok());
  auto group = InProcessCommunicator::MakeGroup("shard[0]", 2, absl::Milliseconds(500));
  std::vector<absl::Status> result(2);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      TinyGpt model = SeededTinyGpt(TinyGptConfig{});
      FsdpEngineOptions eo;
      eo.rank = rank;
      auto engine = FsdpEngine::Create(model.ptr(), *layout, group[rank].get(), nullptr, eo);
      if (!engine.ok()) {
        result[rank] = engine.status();
        return;
      }
      (*engine)->set_step(7);
      if (rank == 1) return;  // Dies before the step.
      at::Tensor idx = at::zeros({2, 8}, at::kLong);
      result[rank] = (*engine)->BeginForward();
      if (!result[rank].ok()) return;
      // The training step's boundary: the adapter returns the collective's own status.
      absl::StatusOr<at::Tensor> loss =
          TorchTry("forward", [&] { return model->loss(idx, idx, engine->get()); });
      result[rank] = loss.ok() ? (*engine)->Backward(*loss) : loss.status();
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_EQ(result[0].code(), absl::StatusCode::kDeadlineExceeded) << result[0];
  EXPECT_TRUE(absl::StrContains(result[0].message(), "group shard[0] op all_gather step 7"))
      << result[0];
}

// The peer leaves after the root gather, so the failure happens inside the model's forward
// (RunUnit -> Run) and crosses LibTorch as common/torch_status.h's StatusException: TorchTry
// gives back DEADLINE_EXCEEDED naming the group, not INTERNAL. The engine stays broken.
TEST(FsdpEngine, PeerLostInsideForwardComesBackAsTheCollectivesStatus) {
  auto layout = ParallelLayout::Create(2, "FULL_SHARD", 0);
  ASSERT_TRUE(layout.ok());
  auto group = InProcessCommunicator::MakeGroup("shard[0]", 2, absl::Milliseconds(500));
  std::vector<absl::Status> result(2), again(2);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      TinyGpt model = SeededTinyGpt(TinyGptConfig{});
      FsdpEngineOptions eo;
      eo.rank = rank;
      auto engine = FsdpEngine::Create(model.ptr(), *layout, group[rank].get(), nullptr, eo);
      if (!engine.ok()) {
        result[rank] = engine.status();
        return;
      }
      (*engine)->set_step(3);
      result[rank] = (*engine)->BeginForward();
      if (!result[rank].ok() || rank == 1) return;  // Rank 1 dies after the root gather.
      at::Tensor idx = at::zeros({2, 8}, at::kLong);
      result[rank] =
          TorchTry("forward", [&] { return model->loss(idx, idx, engine->get()); }).status();
      again[rank] = (*engine)->BeginForward();
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_TRUE(result[1].ok()) << result[1];
  ASSERT_EQ(result[0].code(), absl::StatusCode::kDeadlineExceeded) << result[0];
  EXPECT_TRUE(absl::StrContains(result[0].message(), "group shard[0] op all_gather step 3"))
      << result[0];
  EXPECT_EQ(again[0], result[0]);
}

TEST(FsdpEngine, LocalStateCoversEveryElementOnce) {
  const int s = 3;
  FakeWorld world(s, s);
  std::vector<std::vector<ShardSlice>> slices(s);
  std::vector<std::vector<ShardSlice>> opt_slices(s);
  std::vector<std::unique_ptr<FsdpEngine>> engines(s);
  std::vector<std::unique_ptr<ShardedOptimizer>> opts(s);
  std::vector<TinyGpt> models(s, TinyGpt{nullptr});
  for (int r = 0; r < s; ++r) {
    torch::manual_seed(1);
    models[r] = TinyGpt(TinyGptConfig{});
  }
  std::vector<std::map<std::string, at::Tensor>> full(s);
  auto statuses = RunOnThreads(world, [&](int rank, Communicator* sh, Communicator* rep) {
    auto layout = ParallelLayout::Create(s, "FULL_SHARD", 0);
    FsdpEngineOptions eo;
    eo.rank = rank;
    eo.wrap_policy.kind = WrapPolicyKind::kPerLayer;
    auto engine = FsdpEngine::Create(models[rank].ptr(), *layout, sh, rep, eo);
    if (!engine.ok()) return engine.status();
    auto opt = ShardedOptimizer::Create(engine->get(), ShardedOptimizerOptions{});
    if (!opt.ok()) return opt.status();
    slices[rank] = (*engine)->LocalParamState();
    opt_slices[rank] = (*opt)->LocalState();
    auto state = (*engine)->FullParamState(/*rank0_only=*/false);
    if (!state.ok()) return state.status();
    for (auto& [n, t] : *state) full[rank][n] = t;
    engines[rank] = std::move(*engine);
    opts[rank] = std::move(*opt);
    return absl::OkStatus();
  });
  for (const auto& st : statuses) ASSERT_TRUE(st.ok()) << st;
  // Rebuild every parameter from the slices of all ranks and compare with the full state.
  torch::manual_seed(1);
  TinyGpt fresh(TinyGptConfig{});
  std::map<std::string, at::Tensor> expected;
  for (const auto& item : fresh->named_parameters()) expected[item.key()] = item.value();
  std::map<std::string, at::Tensor> rebuilt;
  std::map<std::string, int64_t> covered;
  for (int r = 0; r < s; ++r) {
    for (const ShardSlice& sl : slices[r]) {
      int64_t n = 1;
      for (int64_t d : sl.global_shape) n *= d;
      if (!rebuilt.count(sl.name)) rebuilt[sl.name] = at::full({n}, NAN);
      rebuilt[sl.name].narrow(0, sl.start, sl.end - sl.start).copy_(sl.local);
      covered[sl.name] += sl.end - sl.start;
    }
  }
  EXPECT_EQ(rebuilt.size(), 26u);  // 27 names minus the tied head.weight alias.
  for (const auto& [name, flat] : rebuilt) {
    ASSERT_TRUE(expected.count(name)) << name;
    EXPECT_EQ(covered[name], expected[name].numel()) << name;
    EXPECT_TRUE(at::equal(flat.view(expected[name].sizes()), expected[name].detach())) << name;
    for (int r = 0; r < s; ++r) EXPECT_TRUE(at::equal(full[r][name], expected[name].detach()));
  }
  EXPECT_EQ(engines[0]->aliases().at("head.weight"), "wte.weight");
  // Optimizer state slices line up with the parameter slices (exp_avg + exp_avg_sq each).
  EXPECT_EQ(opt_slices[1].size(), 2 * slices[1].size());
  EXPECT_EQ(opt_slices[1][3].start, slices[1][3].start);
  EXPECT_EQ(opt_slices[1][3].end, slices[1][3].end);
}

// Every rank's per-step losses and gradient norms are bit-identical in the two runs.
void ExpectBitIdenticalLosses(const std::vector<ParityResult>& a,
                              const std::vector<ParityResult>& b, int steps) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t r = 0; r < a.size(); ++r) {
    ASSERT_EQ(a[r].losses.size(), static_cast<size_t>(steps));
    ASSERT_EQ(b[r].losses.size(), static_cast<size_t>(steps));
    for (int step = 0; step < steps; ++step) {
      EXPECT_EQ(a[r].losses[step], b[r].losses[step]) << "rank " << r << " step " << step;
      EXPECT_EQ(a[r].grad_norms[step], b[r].grad_norms[step]) << "rank " << r << " step " << step;
    }
  }
}

// Activation checkpointing recomputes each block in backward from its saved input with the same
// ops (and RNG state): losses, gradient norms and final parameters are bit-identical to the
// same run without it, on one rank and sharded (with prefetch both ways, hybrid, kept units).
TEST(FsdpEngine, ActivationCheckpointingIsBitIdentical) {
  struct Case {
    const char* strategy;
    int world, degree, prefetch, micro_batches;
  };
  for (const Case& k : {Case{"NO_SHARD", 1, 0, 0, 1}, Case{"FULL_SHARD", 2, 0, 0, 1},
                        Case{"FULL_SHARD", 2, 0, 1, 2}, Case{"FULL_SHARD", 3, 0, 2, 1},
                        Case{"HYBRID_SHARD", 4, 2, 1, 1}, Case{"SHARD_GRAD_OP", 2, 0, 1, 1}}) {
    ParityConfig c;
    c.strategy = k.strategy;
    c.world_size = k.world;
    c.hybrid_shard_degree = k.degree;
    c.prefetch = k.prefetch;
    c.micro_batches = k.micro_batches;
    c.steps = 4;
    SCOPED_TRACE(c.Name());
    const std::vector<ParityResult> plain = RunRanks(c);
    c.activation_checkpointing = true;
    const std::vector<ParityResult> ac = RunRanks(c);
    ASSERT_NO_FATAL_FAILURE(ExpectBitIdenticalLosses(plain, ac, c.steps));
    ASSERT_FALSE(plain[0].params.empty());
    for (const auto& [name, t] : plain[0].params) {
      ASSERT_TRUE(ac[0].params.count(name)) << name;
      EXPECT_TRUE(t.equal(ac[0].params.at(name))) << name;
    }
  }
}

// CPU offload on a CPU model: the shards are separate host tensors (never the device buffer,
// even with S = 1), every gather goes through a staging copy and every reduced shard is added
// from a host copy after backward. The arithmetic is the same, so losses, gradient norms, final
// parameters and optimizer state are bit-identical to the run without it, for every strategy,
// with prefetch, no_sync accumulation, bf16 compute and SGD. (The GPU test,
// fsdp/tests/cpu_offload_gpu_test.cc, checks the CUDA path: pinned memory, asynchronous copies.)
TEST(FsdpEngine, CpuOffloadIsBitIdentical) {
  struct Case {
    const char* strategy;
    int world, degree, prefetch, micro_batches;
    bool bf16, sgd;
  };
  for (const Case& k :
       {Case{"NO_SHARD", 1, 0, 0, 1, false, false}, Case{"NO_SHARD", 2, 0, 1, 2, false, false},
        Case{"FULL_SHARD", 2, 0, 1, 2, false, false}, Case{"FULL_SHARD", 3, 0, 2, 1, false, true},
        Case{"HYBRID_SHARD", 4, 2, 1, 1, false, false},
        Case{"SHARD_GRAD_OP", 2, 0, 1, 1, false, false},
        Case{"FULL_SHARD", 2, 0, 0, 1, true, false}, Case{"NO_SHARD", 1, 0, 0, 1, true, false}}) {
    ParityConfig c;
    c.strategy = k.strategy;
    c.world_size = k.world;
    c.hybrid_shard_degree = k.degree;
    c.prefetch = k.prefetch;
    c.micro_batches = k.micro_batches;
    c.sgd = k.sgd;
    if (k.bf16) c.param_dtype = at::kBFloat16;
    c.steps = 4;
    c.save_state = true;
    SCOPED_TRACE(c.Name());
    const std::vector<ParityResult> plain = RunRanks(c);
    c.cpu_offload = true;
    const std::vector<ParityResult> off = RunRanks(c);
    ASSERT_NO_FATAL_FAILURE(ExpectBitIdenticalLosses(plain, off, c.steps));
    for (size_t r = 0; r < plain.size(); ++r) {
      // Parameters and optimizer state through FullParamState / FullState (gathered from the
      // host shards), on every rank.
      ASSERT_FALSE(plain[r].state.empty());
      ASSERT_EQ(plain[r].state.size(), off[r].state.size());
      for (const auto& [name, t] : plain[r].state) {
        ASSERT_TRUE(off[r].state.count(name)) << name;
        EXPECT_TRUE(t.equal(off[r].state.at(name))) << "rank " << r << " " << name;
      }
    }
  }
}

// The fused AdamW update (what the trainer uses with cpu_offload) against the op-by-op one: the
// same training up to float rounding, with gradient clipping and loss-scale unscaling folded
// into the kernel (the runs clip: the first steps' norms exceed kClip), and through cpu_offload.
TEST(ShardedOptimizer, FusedAdamWMatchesOpByOpWithinFloatRounding) {
  struct Case {
    const char* strategy;
    int world, degree;
    double loss_scale;
    bool offload;
  };
  for (const Case& k :
       {Case{"FULL_SHARD", 2, 0, 0, false}, Case{"HYBRID_SHARD", 4, 2, 0, true},
        Case{"NO_SHARD", 1, 0, 1024, false}, Case{"FULL_SHARD", 2, 0, 1024, true}}) {
    ParityConfig c;
    c.strategy = k.strategy;
    c.world_size = k.world;
    c.hybrid_shard_degree = k.degree;
    c.loss_scale = k.loss_scale;
    c.cpu_offload = k.offload;
    c.steps = 6;
    c.save_state = true;
    SCOPED_TRACE(absl::StrCat(c.Name(), " loss_scale ", k.loss_scale, " offload ", k.offload));
    const std::vector<ParityResult> plain = RunRanks(c);
    c.fused_optimizer = true;
    const std::vector<ParityResult> fused = RunRanks(c);
    ASSERT_EQ(plain.size(), fused.size());
    ASSERT_EQ(plain[0].grad_norms.size(), static_cast<size_t>(c.steps));
    EXPECT_GT(plain[0].grad_norms[0], 1.0) << "clipping is not exercised";
    for (size_t r = 0; r < plain.size(); ++r) {
      for (int step = 0; step < c.steps; ++step) {
        EXPECT_NEAR(fused[r].losses[step], plain[r].losses[step],
                    1e-5 * std::abs(plain[r].losses[step]))
            << "rank " << r << " step " << step;
        EXPECT_NEAR(fused[r].grad_norms[step], plain[r].grad_norms[step],
                    1e-4 * plain[r].grad_norms[step])
            << "rank " << r << " step " << step;
      }
      for (const auto& [name, t] : plain[r].state) {
        ASSERT_TRUE(fused[r].state.count(name)) << name;
        const at::Tensor& u = fused[r].state.at(name);
        if (name == "step") {
          EXPECT_TRUE(t.equal(u));
          continue;
        }
        // Parameters move by ~lr per step; the moments by up to the gradients' size.
        EXPECT_TRUE(at::allclose(u, t, /*rtol=*/1e-4, /*atol=*/1e-6))
            << "rank " << r << " " << name << ": max diff " << (u - t).abs().max().item<double>();
      }
    }
  }
}

// With cpu_offload the persistent state is counted as host memory (nothing of it on the
// device), NO_SHARD frees its device copy after backward like a sharded unit, and the state
// views and loads work on the host shards.
TEST(FsdpEngine, CpuOffloadAccountsShardsAsHostMemory) {
  for (const char* strategy : {"NO_SHARD", "FULL_SHARD"}) {
    SCOPED_TRACE(strategy);
    const int w = 2;
    FakeWorld world(w, std::string(strategy) == "NO_SHARD" ? 1 : w);
    auto statuses = RunOnThreads(world, [&](int rank, Communicator* sh, Communicator* rep) {
      auto layout = ParallelLayout::Create(w, strategy, 0);
      if (!layout.ok()) return layout.status();
      torch::manual_seed(1);
      TinyGpt model{TinyGptConfig{}};
      FsdpEngineOptions eo;
      eo.rank = rank;
      eo.cpu_offload = true;
      auto engine = FsdpEngine::Create(model.ptr(), *layout, sh, rep, eo);
      if (!engine.ok()) return engine.status();
      auto opt = ShardedOptimizer::Create(engine->get(), ShardedOptimizerOptions{});
      if (!opt.ok()) return opt.status();
      for (const auto& f : (*engine)->flat_params()) {
        EXPECT_TRUE(f->offloaded());
        EXPECT_FALSE(f->full_is_shard());
        EXPECT_TRUE(f->shard().is_cpu());
        EXPECT_TRUE(f->shard_grad().is_cpu());
        EXPECT_FALSE(f->full_allocated());  // Even NO_SHARD: the device copy is gathered.
      }
      at::Tensor idx = at::zeros({2, 8}, at::kLong);
      absl::Status st = (*engine)->BeginForward();
      if (!st.ok()) return st;
      at::Tensor loss = model->loss(idx, idx, engine->get());
      st = (*engine)->Backward(loss);
      if (!st.ok()) return st;
      MemoryStats m = (*engine)->memory_stats();
      EXPECT_EQ(m.gathered_param_bytes, 0);
      EXPECT_EQ(m.unsharded_grad_bytes, 0);
      EXPECT_GT(m.peak_gathered_param_bytes, 0);
      EXPECT_EQ(m.device_shard_bytes, 0);
      EXPECT_EQ(m.host_offloaded_shard_bytes, m.param_shard_bytes + m.grad_shard_bytes);
      double grad_sq = 0;
      for (const auto& f : (*engine)->flat_params()) {
        grad_sq += f->shard_grad().pow(2).sum().item<double>();
      }
      EXPECT_GT(grad_sq, 0) << "the reduced gradients reached the host shards";
      auto norm = (*opt)->Step();
      if (!norm.ok()) return norm.status();
      EXPECT_EQ(DevicePersistentStateBytes(**engine, **opt), 0);
      EXPECT_EQ(PersistentStateBytes(**engine, **opt),
                m.param_shard_bytes + m.grad_shard_bytes + (*opt)->state_bytes());
      // Writing through the state views changes what the next gather computes with.
      auto full = (*engine)->FullParamState(/*rank0_only=*/false);
      if (!full.ok()) return full.status();
      std::map<std::string, at::Tensor> zeros;
      for (auto& [name, t] : *full) zeros[name] = at::zeros_like(t);
      st = (*engine)->LoadFullParamState(zeros);
      if (!st.ok()) return st;
      for (const ShardSlice& s : (*engine)->LocalParamState()) {
        EXPECT_EQ(s.local.abs().sum().item<double>(), 0) << s.name;
      }
      return absl::OkStatus();
    });
    for (const auto& st : statuses) ASSERT_TRUE(st.ok()) << st;
  }
}

double MaxRelLossDiff(const ParityResult& a, const ParityResult& b) {
  double worst = 0;
  for (size_t i = 0; i < a.losses.size() && i < b.losses.size(); ++i) {
    worst = std::max(worst, std::abs(a.losses[i] - b.losses[i]) / std::abs(b.losses[i]));
  }
  return worst;
}

// Mixed precision against float32, per dtype. Tolerances on the per-step loss, relative: bf16
// keeps 8 significant bits (rounding 2^-9 ~ 2e-3 per operation; measured 1.9e-3 over 5 steps),
// so 1e-2; fp16 keeps 11 bits (2^-12 ~ 2.4e-4, 8x finer; measured 2.2e-4), so 2e-3. Sharded runs
// must match the single-rank run of the same precision within the same tolerance (they differ only
// in reduction order and the reduce dtype's rounding of the average). The losses must not be
// bit-equal to fp32: the low precision really computes.
TEST(FsdpEngine, MixedPrecisionMatchesFloat32WithinTheDtypesTolerance) {
  ParityConfig c;
  c.strategy = "NO_SHARD";
  c.steps = 5;
  const std::vector<ParityResult> fp32 = RunRanks(c);
  ASSERT_EQ(fp32.size(), 1u);
  struct Case {
    at::ScalarType param, reduce;
    double tolerance;
  };
  for (const Case& k :
       {Case{at::kBFloat16, at::kBFloat16, 1e-2}, Case{at::kBFloat16, at::kFloat, 1e-2},
        Case{at::kHalf, at::kFloat, 2e-3}, Case{at::kHalf, at::kHalf, 2e-3}}) {
    SCOPED_TRACE(
        absl::StrCat("param ", c10::toString(k.param), " reduce ", c10::toString(k.reduce)));
    ParityConfig m = c;
    m.param_dtype = k.param;
    m.reduce_dtype = k.reduce;
    const std::vector<ParityResult> one = RunRanks(m);
    ASSERT_EQ(one.size(), 1u);
    ASSERT_EQ(one[0].losses.size(), fp32[0].losses.size());
    const double vs_fp32 = MaxRelLossDiff(one[0], fp32[0]);
    EXPECT_LE(vs_fp32, k.tolerance);
    EXPECT_GT(vs_fp32, 0) << "mixed precision computed exactly the float32 losses";
    // Parameters stay float32 masters: the engine's full state is float32.
    for (const auto& [name, t] : one[0].params) EXPECT_EQ(t.scalar_type(), at::kFloat) << name;
    for (const char* strategy : {"FULL_SHARD", "HYBRID_SHARD"}) {
      ParityConfig sharded = m;
      sharded.strategy = strategy;
      sharded.world_size = 4;
      sharded.hybrid_shard_degree = std::string(strategy) == "HYBRID_SHARD" ? 2 : 0;
      sharded.prefetch = 1;
      const std::vector<ParityResult> w4 = RunRanks(sharded);
      ASSERT_EQ(w4.size(), 4u);
      ParityResult mean = w4[0];
      for (size_t i = 0; i < mean.losses.size(); ++i) {
        double sum = 0;
        for (const ParityResult& r : w4) sum += r.losses[i];
        mean.losses[i] = sum / 4;
      }
      const double vs_single = MaxRelLossDiff(mean, one[0]);
      EXPECT_LE(vs_single, k.tolerance) << strategy;
      std::printf(
          "param %s reduce %s: max relative loss difference %.2e vs fp32, %.2e %s W=4 "
          "vs W=1\n",
          c10::toString(k.param), c10::toString(k.reduce), vs_fp32, vs_single, strategy);
    }
  }
}

TEST(DynamicLossScaler, BacksOffOnOverflowAndGrowsAfterGoodSteps) {
  LossScalerOptions o;
  o.init_scale = 1024;
  o.growth_interval = 3;
  o.min_scale = 256;
  DynamicLossScaler s(o);
  EXPECT_EQ(s.scale(), 1024);
  s.Update(true);
  EXPECT_EQ(s.scale(), 512);
  s.Update(false);
  s.Update(false);
  EXPECT_EQ(s.scale(), 512);
  s.Update(false);
  EXPECT_EQ(s.scale(), 1024);  // Three good steps in a row.
  s.Update(false);
  s.Update(true);  // Resets the run of good steps.
  s.Update(false);
  s.Update(false);
  EXPECT_EQ(s.scale(), 512);
  s.Update(true);
  s.Update(true);
  EXPECT_EQ(s.scale(), 256);  // Floor.
  EXPECT_EQ(s.skipped_steps(), 4);
}

// The optimizer's side of loss scaling on one rank: a power-of-two scale unscales exactly (the
// step is bit-identical to an unscaled one), and non-finite gradients skip the step (parameters,
// optimizer state and step count untouched) and are dropped.
TEST(ShardedOptimizer, GradScaleUnscalesExactlyAndSkipsNonFiniteSteps) {
  at::Tensor idx = at::randint(37, {4, 8}, at::kLong);
  std::map<std::string, at::Tensor> after[2];
  for (int scaled = 0; scaled < 2; ++scaled) {
    torch::manual_seed(5);
    TinyGpt model(TinyGptConfig{});
    auto layout = ParallelLayout::Create(1, "NO_SHARD", 0);
    ASSERT_TRUE(layout.ok());
    FsdpEngineOptions eo;
    eo.wrap_policy.block_type = "Block";
    auto engine = FsdpEngine::Create(model.ptr(), *layout, nullptr, nullptr, eo);
    ASSERT_TRUE(engine.ok()) << engine.status();
    ShardedOptimizerOptions oo;
    oo.lr = 1e-2;
    oo.grad_clip = 1.0;
    auto opt = ShardedOptimizer::Create(engine->get(), oo);
    ASSERT_TRUE(opt.ok()) << opt.status();
    const double scale = scaled ? 1024.0 : 1.0;
    (*opt)->set_grad_scale(scale);
    ASSERT_TRUE((*engine)->BeginForward().ok());
    ASSERT_TRUE((*engine)->Backward(model->loss(idx, idx, engine->get()) * scale).ok());
    ASSERT_TRUE((*opt)->Step().ok());
    EXPECT_FALSE((*opt)->last_step_skipped());
    auto state = (*engine)->FullParamState(false);
    ASSERT_TRUE(state.ok());
    for (auto& [name, t] : *state) after[scaled][name] = t;
    if (!scaled) continue;
    // An overflowing step: skipped, nothing changes.
    ASSERT_TRUE((*engine)->BeginForward().ok());
    at::Tensor inf = at::full({}, std::numeric_limits<float>::infinity());
    ASSERT_TRUE((*engine)->Backward(model->loss(idx, idx, engine->get()) * inf).ok());
    auto norm = (*opt)->Step();
    ASSERT_TRUE(norm.ok());
    EXPECT_FALSE(std::isfinite(*norm));
    EXPECT_TRUE((*opt)->last_step_skipped());
    EXPECT_EQ((*opt)->step_count(), 1);
    auto again = (*engine)->FullParamState(false);
    ASSERT_TRUE(again.ok());
    for (auto& [name, t] : *again) EXPECT_TRUE(t.equal(after[1][name])) << name;
    for (const auto& f : (*engine)->flat_params()) {
      EXPECT_EQ(f->shard_grad().abs().sum().item<double>(), 0.0) << f->name();
    }
  }
  for (auto& [name, t] : after[0]) EXPECT_TRUE(t.equal(after[1][name])) << name;
}

// float16 end to end with dynamic loss scaling, sharded: a scale that overflows float16 at first
// (2^24 times gradients of order 1e-2..1) skips steps and backs off until the gradients fit;
// training then stays within fp16's tolerance of the unscaled fp16 run's final loss trend.
TEST(FsdpEngine, Float16LossScalingSkipsOverflowingStepsAndBacksOff) {
  ParityConfig c;
  c.strategy = "FULL_SHARD";
  c.world_size = 2;
  c.steps = 12;
  c.param_dtype = at::kHalf;
  c.reduce_dtype = at::kFloat;
  c.loss_scale = 1 << 24;
  const std::vector<ParityResult> big = RunRanks(c);
  ASSERT_EQ(big.size(), 2u);
  EXPECT_GE(big[0].skipped_steps, 1);
  EXPECT_LT(big[0].skipped_steps, c.steps);
  EXPECT_EQ(big[0].skipped_steps, big[1].skipped_steps);  // Every rank decides the same.
  EXPECT_LT(big[0].final_loss_scale, 1 << 24);
  std::printf("fp16 from scale 2^24: %lld of %d steps skipped, final scale %g\n",
              static_cast<long long>(big[0].skipped_steps), c.steps, big[0].final_loss_scale);
  // A scale that fits from the start skips nothing and trains like fp32 within fp16 tolerance.
  c.loss_scale = 256;
  const std::vector<ParityResult> fits = RunRanks(c);
  ASSERT_EQ(fits.size(), 2u);
  EXPECT_EQ(fits[0].skipped_steps, 0);
  ParityConfig ref = c;
  ref.param_dtype = at::kFloat;
  ref.loss_scale = 0;
  const std::vector<ParityResult> fp32 = RunRanks(ref);
  ASSERT_EQ(fp32.size(), 2u);
  EXPECT_LE(MaxRelLossDiff(fits[0], fp32[0]), 2e-3);
  for (double loss : big[0].losses) EXPECT_TRUE(std::isfinite(loss));
}

// Bytes malloc has handed out and not taken back (LibTorch's CPU allocator is malloc). Under
// AddressSanitizer (tools/sanitize.sh) malloc is ASan's, which glibc's mallinfo2 does not see.
#ifdef __SANITIZE_ADDRESS__
extern "C" size_t __sanitizer_get_current_allocated_bytes();  // libasan (gcc ships no header)
#endif
int64_t MallocInUse() {
#ifdef __SANITIZE_ADDRESS__
  return static_cast<int64_t>(__sanitizer_get_current_allocated_bytes());
#else
  struct mallinfo2 m = mallinfo2();
  return static_cast<int64_t>(m.uordblks + m.hblkhd);
#endif
}

// The memory activation checkpointing saves, measured as the heap bytes a forward pass leaves
// allocated for backward (one rank, NO_SHARD so no gathered buffers change between the two
// measurements): with checkpointing only each block's input is kept.
TEST(FsdpEngine, ActivationCheckpointingKeepsOnlyBlockInputs) {
  // One intra-op thread: no per-thread allocator caches between the two measurements.
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  TinyGptConfig config;
  config.n_layer = 6;
  config.n_embd = 64;
  config.mlp_hidden = 256;
  config.block_size = 32;
  const int64_t batch = 32;
  int64_t held[2] = {0, 0};
  double losses[2] = {0, 0};
  for (int ac = 0; ac < 2; ++ac) {
    torch::manual_seed(3);
    TinyGpt model(config);
    auto layout = ParallelLayout::Create(1, "NO_SHARD", 0);
    ASSERT_TRUE(layout.ok()) << layout.status();
    FsdpEngineOptions eo;
    eo.wrap_policy.block_type = "Block";
    eo.activation_checkpointing = ac == 1;
    auto engine = FsdpEngine::Create(model.ptr(), *layout, nullptr, nullptr, eo);
    ASSERT_TRUE(engine.ok()) << engine.status();
    at::Tensor idx = at::randint(config.vocab, {batch, config.block_size}, at::kLong);
    for (int step = 0; step < 2; ++step) {  // The second step: allocator caches are warm.
      ASSERT_TRUE((*engine)->BeginForward().ok());
      const int64_t before = MallocInUse();
      at::Tensor loss = model->loss(idx, idx, engine->get());
      held[ac] = MallocInUse() - before;
      losses[ac] = loss.item<double>();
      ASSERT_TRUE((*engine)->Backward(loss).ok());
    }
  }
  const int64_t activation_bytes = batch * config.block_size * config.n_embd * 4;
  std::printf(
      "activation memory held after forward: %.2f MiB without checkpointing, %.2f MiB "
      "with (%.1f%%); one block input is %.2f MiB\n",
      held[0] / 1048576.0, held[1] / 1048576.0, 100.0 * held[1] / held[0],
      activation_bytes / 1048576.0);
  at::set_num_threads(threads);
  EXPECT_EQ(losses[0], losses[1]);
  EXPECT_GT(held[0], 4 * held[1]);
  // Checkpointed: about the 6 block inputs plus the head's activations.
  EXPECT_GT(held[0], config.n_layer * 8 * activation_bytes);
}

// limit_all_gathers: with forward and backward prefetch over six blocks, at most two blocks are
// gathered at any time; parameters and losses are the same as without prefetch.
TEST(FsdpEngine, LimitAllGathersBoundsGatheredBlocksToTwo) {
  for (auto prefetch :
       {FsdpEngineOptions::BackwardPrefetch::kPre, FsdpEngineOptions::BackwardPrefetch::kPost}) {
    for (bool ac : {false, true}) {
      SCOPED_TRACE(
          absl::StrCat(prefetch == FsdpEngineOptions::BackwardPrefetch::kPre ? "pre" : "post",
                       ac ? " checkpointed" : ""));
      auto layout = ParallelLayout::Create(2, "FULL_SHARD", 0);
      ASSERT_TRUE(layout.ok()) << layout.status();
      FakeWorld world(2, 2);
      auto statuses = RunOnThreads(world, [&](int rank, Communicator* sh, Communicator* rep) {
        TinyGptConfig config;
        config.n_layer = 6;
        TinyGpt model = SeededTinyGpt(config);
        FsdpEngineOptions eo;
        eo.rank = rank;
        eo.wrap_policy.block_type = "Block";
        eo.forward_prefetch = true;
        eo.backward_prefetch = prefetch;
        eo.limit_all_gathers = true;
        eo.activation_checkpointing = ac;
        auto engine = FsdpEngine::Create(model.ptr(), *layout, sh, rep, eo);
        if (!engine.ok()) return engine.status();
        at::Tensor idx = at::zeros({2, 8}, at::kLong);
        for (int step = 0; step < 3; ++step) {
          absl::Status st = (*engine)->BeginForward();
          if (!st.ok()) return st;
          st = (*engine)->Backward(model->loss(idx, idx, engine->get()));
          if (!st.ok()) return st;
        }
        EXPECT_GE((*engine)->peak_gathered_groups(), 2);  // Prefetch did run ahead.
        EXPECT_LE((*engine)->peak_gathered_groups(), 2);
        return absl::OkStatus();
      });
      for (const auto& st : statuses) ASSERT_TRUE(st.ok()) << st;
    }
  }
}

}  // namespace
}  // namespace shardline::fsdp::testing

int main(int argc, char** argv) {
  at::set_num_threads(1);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
