// CPU offload (FsdpEngineOptions::cpu_offload) on the one GPU a test machine has (tag "gpu").
// NCCL refuses two ranks on one GPU, so the runs are single-rank (S = 1: the device copy of the
// host shard, the device->host gradient copy, the optimizer on the host). Sharded ranks cannot
// share the GPU as threads of one process either: LibTorch's autograd runs every CUDA backward
// task of a process on one thread per device, so a rank blocked in a collective inside a backward
// hook starves the others (a first version of this test deadlocked so on the H200). The sharded
// paths (staging copy before each all-gather, host copy of each reduce-scattered shard) are
// checked bit for bit on CPU ranks (fsdp_engine_test CpuOffloadIsBitIdentical).
// Every run with offload must match the same run without it within 1e-5: the optimizer runs on
// the host instead of the GPU, op by op (the same formulas, last-bit differences at most) or, as
// the trainer runs it with offload, with the fused AdamW kernel (float rounding).
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <torch/utils.h>

#include "fsdp/fsdp_engine.h"
#include "fsdp/layout.h"
#include "fsdp/nccl_communicator.h"
#include "fsdp/sharded_optimizer.h"
#include "fsdp/tcp_kv_store.h"
#include "fsdp/testing/tiny_gpt.h"
#include "fsdp/tests/parity.h"
#include "gtest/gtest.h"

namespace shardline::fsdp::testing {
namespace {

const at::Device kCuda(at::kCUDA, 0);

class CpuOffloadGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (c10::cuda::device_count() == 0) GTEST_SKIP() << "no GPU";
    // Both runs of a comparison must compute the same forward and backward on the GPU, so that
    // only the optimizer's host arithmetic differs: deterministic kernels (cuBLAS needs a fixed
    // workspace, set before its first handle), warnings for ops without one.
    setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
    at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/true);
  }
};

std::unique_ptr<TcpKvStore> Store() {
  TcpKvStore::Options o;
  o.serve = true;
  auto store = TcpKvStore::Create(o);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? std::move(*store) : nullptr;
}

std::unique_ptr<Communicator> SingleRankNccl(TcpKvStore* store, const std::string& name) {
  NcclCommunicator::Options o;
  o.name = name;
  o.store = store;
  o.cuda_device = 0;
  o.timeout = absl::Seconds(60);
  auto comm = NcclCommunicator::Create(o);
  EXPECT_TRUE(comm.ok()) << comm.status();
  return comm.ok() ? std::move(*comm) : nullptr;
}

int64_t CudaAllocatedBytes() {
  const auto stats = c10::getDeviceAllocator(c10::DeviceType::CUDA)->getDeviceStats(0);
  return stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)]
      .current;
}

void ExpectClose(const ParityResult& plain, const ParityResult& off, int steps) {
  ASSERT_EQ(plain.losses.size(), static_cast<size_t>(steps));
  ASSERT_EQ(off.losses.size(), static_cast<size_t>(steps));
  for (int step = 0; step < steps; ++step) {
    EXPECT_NEAR(off.losses[step], plain.losses[step], 1e-5 * std::abs(plain.losses[step]))
        << "step " << step;
    EXPECT_NEAR(off.grad_norms[step], plain.grad_norms[step], 1e-5 * plain.grad_norms[step])
        << "step " << step;
  }
  EXPECT_LT(plain.losses.back(), plain.losses.front()) << "the model should learn";
  ASSERT_FALSE(plain.params.empty());
  ASSERT_EQ(plain.params.size(), off.params.size());
  for (const auto& [name, t] : plain.params) {
    ASSERT_TRUE(off.params.count(name)) << name;
    const at::Tensor& o = off.params.at(name);
    EXPECT_TRUE(o.is_cpu()) << name << ": an offloaded engine returns host tensors";
    EXPECT_TRUE(t.is_cuda()) << name;
    const double diff = (t.cpu() - o.cpu()).abs().max().item<double>();
    EXPECT_LE(diff, 1e-5) << name;
  }
}

// Single-rank NCCL group (W = 1, NO_SHARD and FULL_SHARD with S = 1), AdamW and SGD, fp32 and
// bf16 compute: the same losses and final parameters with and without offload.
TEST_F(CpuOffloadGpuTest, SingleRankNcclMatchesTheRunWithoutOffload) {
  auto store = Store();
  ASSERT_NE(store, nullptr);
  int group = 0;
  struct Case {
    const char* strategy;
    bool sgd;
    at::ScalarType param_dtype;
    bool fused;  // With offload only, as the trainer does.
  };
  for (const Case& k :
       {Case{"NO_SHARD", false, at::kFloat, false}, Case{"NO_SHARD", false, at::kFloat, true},
        Case{"FULL_SHARD", true, at::kFloat, false},
        Case{"FULL_SHARD", false, at::kBFloat16, true}}) {
    ParityConfig c;
    c.strategy = k.strategy;
    c.world_size = 1;
    c.sgd = k.sgd;
    c.param_dtype = k.param_dtype;
    c.prefetch = 1;
    c.micro_batches = 2;
    c.steps = 8;
    c.device = kCuda;
    SCOPED_TRACE(c.Name() + (k.fused ? " fused" : ""));
    std::vector<ParityResult> results;
    for (bool offload : {false, true}) {
      c.cpu_offload = offload;
      c.fused_optimizer = offload && k.fused;
      std::unique_ptr<Communicator> shard =
          SingleRankNccl(store.get(), "shard" + std::to_string(group++));
      ASSERT_NE(shard, nullptr);
      absl::StatusOr<ParityResult> r = RunFsdpRank(c, 0, shard.get(), nullptr);
      ASSERT_TRUE(r.ok()) << r.status();
      results.push_back(std::move(*r));
    }
    ExpectClose(results[0], results[1], c.steps);
  }
}

// The fused AdamW kernel on CUDA (what the trainer runs for every AdamW job) against the op-by-op
// update on the same GPU, without offload: the same training within float rounding, with the
// clipping coefficient (the first steps' norms exceed the parity runs' clip) and the loss-scale
// unscaling folded into the kernel's grad_scale, in fp32 and bf16 compute.
TEST_F(CpuOffloadGpuTest, FusedAdamWOnCudaMatchesOpByOpWithinFloatRounding) {
  auto store = Store();
  ASSERT_NE(store, nullptr);
  int group = 0;
  for (const auto& [param_dtype, loss_scale] :
       {std::pair{at::kFloat, 0.0}, std::pair{at::kBFloat16, 1024.0}}) {
    ParityConfig c;
    c.strategy = "NO_SHARD";
    c.world_size = 1;
    c.param_dtype = param_dtype;
    c.loss_scale = loss_scale;
    c.steps = 6;
    c.device = kCuda;
    SCOPED_TRACE(c.Name() + " loss_scale " + std::to_string(loss_scale));
    std::vector<ParityResult> results;
    for (bool fused : {false, true}) {
      c.fused_optimizer = fused;
      std::unique_ptr<Communicator> shard =
          SingleRankNccl(store.get(), "fused" + std::to_string(group++));
      ASSERT_NE(shard, nullptr);
      absl::StatusOr<ParityResult> r = RunFsdpRank(c, 0, shard.get(), nullptr);
      ASSERT_TRUE(r.ok()) << r.status();
      results.push_back(std::move(*r));
    }
    const ParityResult &plain = results[0], &fused = results[1];
    ASSERT_EQ(plain.losses.size(), static_cast<size_t>(c.steps));
    ASSERT_EQ(fused.losses.size(), static_cast<size_t>(c.steps));
    EXPECT_GT(plain.grad_norms[0], 1.0) << "clipping is not exercised";
    for (int step = 0; step < c.steps; ++step) {
      EXPECT_NEAR(fused.losses[step], plain.losses[step], 1e-5 * std::abs(plain.losses[step]))
          << "step " << step;
      EXPECT_NEAR(fused.grad_norms[step], plain.grad_norms[step], 1e-4 * plain.grad_norms[step])
          << "step " << step;
    }
    for (const auto& [name, t] : plain.params) {
      ASSERT_TRUE(fused.params.count(name)) << name;
      const double diff = (t.cpu() - fused.params.at(name).cpu()).abs().max().item<double>();
      EXPECT_LE(diff, 1e-5) << name;
    }
  }
}

// The state really lives in host memory: shards and gradient shards pinned, optimizer state on
// the host, gathered buffers on the GPU, nothing persistent left on the GPU between steps (the
// caching allocator's live bytes drop by at least the 16 bytes per parameter of shard, gradient
// shard and AdamW state that a run without offload keeps there).
TEST_F(CpuOffloadGpuTest, StateIsPinnedHostMemoryAndLeavesTheGpu) {
  auto store = Store();
  ASSERT_NE(store, nullptr);
  auto layout = ParallelLayout::Create(1, "NO_SHARD", 0);
  ASSERT_TRUE(layout.ok()) << layout.status();
  std::map<bool, int64_t> live_after_step;
  int64_t num_params = 0;
  for (bool offload : {false, true}) {
    SCOPED_TRACE(offload ? "offload" : "no offload");
    std::unique_ptr<Communicator> shard =
        SingleRankNccl(store.get(), offload ? "state_offload" : "state_plain");
    ASSERT_NE(shard, nullptr);
    c10::cuda::device_synchronize();
    const int64_t before = CudaAllocatedBytes();
    {
      torch::manual_seed(1);
      TinyGpt model{TinyGptConfig{}};
      model->to(kCuda);
      FsdpEngineOptions eo;
      eo.cpu_offload = offload;
      auto engine = FsdpEngine::Create(model.ptr(), *layout, shard.get(), nullptr, eo);
      ASSERT_TRUE(engine.ok()) << engine.status();
      auto opt = ShardedOptimizer::Create(engine->get(), ShardedOptimizerOptions{});
      ASSERT_TRUE(opt.ok()) << opt.status();
      EXPECT_EQ((*engine)->device(), kCuda);
      for (const auto& f : (*engine)->flat_params()) {
        SCOPED_TRACE(f->name());
        EXPECT_EQ(f->offloaded(), offload);
        EXPECT_EQ(f->shard().is_cpu(), offload);
        EXPECT_EQ(f->shard().is_pinned(), offload);
        EXPECT_EQ(f->shard_grad().is_cpu(), offload);
        EXPECT_EQ(f->shard_grad().is_pinned(), offload);
        EXPECT_TRUE(f->full().is_cuda());
      }
      for (const ShardSlice& s : (*opt)->LocalState()) {
        EXPECT_EQ(s.local.is_cpu(), offload) << s.name;
      }
      for (int step = 0; step < 3; ++step) {
        at::Tensor idx =
            at::randint(37, {4, 8}, at::TensorOptions().dtype(at::kLong).device(kCuda));
        ASSERT_TRUE((*engine)->BeginForward().ok());
        at::Tensor loss = model->loss(idx, idx, engine->get());
        absl::Status st = (*engine)->Backward(loss);
        ASSERT_TRUE(st.ok()) << st;
        auto norm = (*opt)->Step();
        ASSERT_TRUE(norm.ok()) << norm.status();
        EXPECT_TRUE(std::isfinite(*norm));
      }
      const MemoryStats m = (*engine)->memory_stats();
      num_params = m.num_params;
      EXPECT_EQ(m.gathered_param_bytes, 0);
      EXPECT_EQ(m.unsharded_grad_bytes, 0);
      if (offload) {
        EXPECT_EQ(m.device_shard_bytes, 0);
        EXPECT_EQ(m.host_offloaded_shard_bytes, m.param_shard_bytes + m.grad_shard_bytes);
        EXPECT_EQ(DevicePersistentStateBytes(**engine, **opt), 0);
      } else {
        EXPECT_EQ(m.host_offloaded_shard_bytes, 0);
        EXPECT_EQ(DevicePersistentStateBytes(**engine, **opt),
                  PersistentStateBytes(**engine, **opt));
      }
      // State export: host tensors with offload, loadable back.
      auto full = (*engine)->FullParamState(/*rank0_only=*/false);
      ASSERT_TRUE(full.ok()) << full.status();
      std::map<std::string, at::Tensor> state;
      for (auto& [name, t] : *full) {
        EXPECT_EQ(t.is_cpu(), offload) << name;
        state[name] = t;
      }
      auto opt_state = (*opt)->FullState(/*rank0_only=*/false);
      ASSERT_TRUE(opt_state.ok()) << opt_state.status();
      std::map<std::string, at::Tensor> ostate(opt_state->begin(), opt_state->end());
      ASSERT_TRUE((*engine)->LoadFullParamState(state).ok());
      ASSERT_TRUE((*opt)->LoadFullState(ostate).ok());
      c10::cuda::device_synchronize();
      live_after_step[offload] = CudaAllocatedBytes() - before;
    }
  }
  ASSERT_GT(num_params, 0);
  EXPECT_GE(live_after_step[false] - live_after_step[true], 16 * num_params)
      << "live CUDA bytes after the steps: " << live_after_step[false] << " without offload, "
      << live_after_step[true] << " with it";
}

}  // namespace
}  // namespace shardline::fsdp::testing
