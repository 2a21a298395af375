// NcclCommunicator on the one GPU a test machine has. NCCL refuses two ranks on the same GPU,
// so collectives are checked on single-rank groups (every op, every dtype, stream ordering);
// the bootstrap timeout uses a two-rank group whose second rank never comes.
#include "fsdp/nccl_communicator.h"

#include <cuda_runtime_api.h>

#include <ATen/ATen.h>
#include <ATen/cuda/Sleep.h>
#include <c10/cuda/CUDAFunctions.h>

#include "fsdp/comm_groups.h"
#include "fsdp/tcp_kv_store.h"
#include "gtest/gtest.h"

namespace shardline::fsdp {
namespace {

std::unique_ptr<TcpKvStore> Store() {
  TcpKvStore::Options o;
  o.serve = true;
  auto store = TcpKvStore::Create(o);
  EXPECT_TRUE(store.ok()) << store.status();
  return std::move(*store);
}

// Cycles of the delay kernel (at::cuda::sleep) that hold the current stream for `d`.
int64_t CyclesFor(absl::Duration d) {
  int khz = 0;
  cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0);
  return static_cast<int64_t>(absl::ToDoubleSeconds(d) * khz * 1000.0);
}

class NcclTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (c10::cuda::device_count() == 0) GTEST_SKIP() << "no GPU";
  }
};

TEST_F(NcclTest, SingleRankCollectivesOnCudaTensors) {
  auto store = Store();
  NcclCommunicator::Options options;
  options.name = "world";
  options.store = store.get();
  options.timeout = absl::Seconds(30);
  auto comm = NcclCommunicator::Create(options);
  ASSERT_TRUE(comm.ok()) << comm.status();
  const auto cuda = at::TensorOptions().device(at::kCUDA, 0);
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf, at::kDouble}) {
    SCOPED_TRACE(std::string(c10::toString(dtype)));
    // Produced on the current stream right before the collective: tests the ordering event.
    at::Tensor in = at::arange(1 << 20, cuda.dtype(at::kFloat)).mul_(0.5).to(dtype);
    at::Tensor out = at::zeros({1 << 20}, cuda.dtype(dtype));
    ASSERT_TRUE((*comm)->AllGather(in, out).ok());
    EXPECT_TRUE(out.equal(in));
    at::Tensor rs = at::zeros({1 << 20}, cuda.dtype(dtype));
    auto handle = (*comm)->ReduceScatterAsync(in, rs, ReduceOp::kAvg);
    ASSERT_TRUE(handle->Wait().ok());
    EXPECT_TRUE(handle->Wait().ok());
    EXPECT_TRUE(rs.equal(in));
    at::Tensor t = in.clone();
    ASSERT_TRUE((*comm)->AllReduce(t, ReduceOp::kSum).ok());
    EXPECT_TRUE(t.equal(in));
    ASSERT_TRUE((*comm)->Broadcast(t, 0).ok());
  }
  at::Tensor counter = at::full({3}, 7, cuda.dtype(at::kLong));
  ASSERT_TRUE((*comm)->AllReduce(counter, ReduceOp::kSum).ok());
  EXPECT_EQ(counter.sum().item<int64_t>(), 21);
  EXPECT_TRUE((*comm)->Barrier().ok());
}

TEST_F(NcclTest, RejectsCpuTensors) {
  auto store = Store();
  NcclCommunicator::Options options;
  options.name = "shard[0]";
  options.store = store.get();
  auto comm = NcclCommunicator::Create(options);
  ASSERT_TRUE(comm.ok()) << comm.status();
  absl::Status s = (*comm)->AllReduce(at::ones({4}), ReduceOp::kSum);
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("group shard[0] op all_reduce: in-place tensor Float[4] on cpu is "
                             "not on cuda"),
            std::string::npos)
      << s;
}

TEST_F(NcclTest, BootstrapTimesOutWhenAPeerNeverJoins) {
  auto store = Store();
  NcclCommunicator::Options options;
  options.name = "replicate[1]";
  options.rank = 0;
  options.size = 2;
  options.store = store.get();
  options.timeout = absl::Seconds(3);
  options.global_ranks = {1, 3};
  const absl::Time start = absl::Now();
  auto comm = NcclCommunicator::Create(options);
  ASSERT_EQ(comm.status().code(), absl::StatusCode::kDeadlineExceeded) << comm.status();
  EXPECT_EQ(comm.status().message().rfind("group replicate[1] op connect step 0: timed out", 0), 0u)
      << comm.status();
  // Names who it waited on, as the Gloo backend's messages do.
  EXPECT_NE(comm.status().message().find("waiting for 2 ranks to join (group ranks [1, 3], this "
                                         "is rank 1)"),
            absl::string_view::npos)
      << comm.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
}

TEST_F(NcclTest, CreateCommGroupsUsesTheRegisteredNcclBackend) {
  auto store = Store();
  CommOptions options;
  options.backend = CommBackend::kNccl;
  options.cuda_device = 0;
  // With W = 1 every group is a LocalCommunicator, but CreateCommGroups looks the backend up
  // first: without the registration in nccl_communicator.cc this is FAILED_PRECONDITION.
  auto groups = CreateCommGroups(ParallelLayout(), 0, store.get(), options);
  ASSERT_TRUE(groups.ok()) << groups.status();
  at::Tensor t = at::ones({8}, at::TensorOptions().device(at::kCUDA, 0));
  EXPECT_TRUE(groups->world->AllReduce(t, ReduceOp::kSum).ok());
}

TEST_F(NcclTest, WaitOrdersTheStreamWithoutBlockingTheHost) {
  auto store = Store();
  NcclCommunicator::Options options;
  options.store = store.get();
  options.timeout = absl::Seconds(60);
  auto comm = NcclCommunicator::Create(options);
  ASSERT_TRUE(comm.ok()) << comm.status();
  const auto cuda = at::TensorOptions().device(at::kCUDA, 0);
  at::Tensor in = at::arange(1 << 20, cuda.dtype(at::kFloat));
  at::Tensor out = at::zeros({1 << 20}, cuda.dtype(at::kFloat));
  at::cuda::sleep(CyclesFor(absl::Seconds(2)));  // Holds the current stream, so the gather too.
  const absl::Time start = absl::Now();
  auto handle = (*comm)->AllGatherAsync(in, out);
  ASSERT_TRUE(handle->Wait().ok());
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(500));  // The host did not wait 2 s.
  // Work queued on the stream after Wait sees the gathered values.
  EXPECT_TRUE(out.clone().equal(in));
  EXPECT_TRUE((*comm)->AsyncError().ok());
}

// The abort path on one GPU: a kernel holds the stream while two collectives time out. The
// watchdog fails both with DEADLINE_EXCEEDED within the timeout plus a small bound, aborts the
// communicator once, later calls fail fast, and the destructor neither synchronizes the held
// stream nor touches the aborted communicator.
TEST_F(NcclTest, KernelHoldingTheStreamTimesOutTwoCollectivesWithinTheBound) {
  auto store = Store();
  NcclCommunicator::Options options;
  options.store = store.get();
  options.timeout = absl::Seconds(1);
  auto comm = NcclCommunicator::Create(options);
  ASSERT_TRUE(comm.ok()) << comm.status();
  const auto cuda = at::TensorOptions().device(at::kCUDA, 0);
  at::Tensor in = at::ones({1 << 16}, cuda.dtype(at::kFloat));
  at::Tensor out = at::zeros({1 << 16}, cuda.dtype(at::kFloat));
  at::Tensor t = at::ones({1 << 16}, cuda.dtype(at::kFloat));
  at::cuda::sleep(CyclesFor(absl::Seconds(8)));
  const absl::Time start = absl::Now();
  auto gather = (*comm)->AllGatherAsync(in, out);
  auto reduce = (*comm)->AllReduceAsync(t, ReduceOp::kSum);
  absl::Status async;
  while ((async = (*comm)->AsyncError()).ok() && absl::Now() - start < absl::Seconds(10)) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  const absl::Duration took = absl::Now() - start;
  ASSERT_EQ(async.code(), absl::StatusCode::kDeadlineExceeded) << async;
  EXPECT_GE(took, absl::Seconds(1));
  EXPECT_LT(took, absl::Seconds(4)) << "the abort took too long";
  EXPECT_EQ(async.message().rfind("group world op all_gather step 0: timed out after 1s", 0), 0u)
      << async;
  const absl::Status g = gather->Wait();
  const absl::Status r = reduce->Wait();
  EXPECT_EQ(g, async);
  EXPECT_EQ(r.code(), absl::StatusCode::kDeadlineExceeded) << r;
  EXPECT_EQ(r.message().rfind("group world op all_reduce step 0: ", 0), 0u) << r;
  const absl::Status later = (*comm)->AllReduce(t, ReduceOp::kSum);
  EXPECT_EQ(later.code(), absl::StatusCode::kFailedPrecondition) << later;
  EXPECT_NE(later.message().find("communicator is broken by an earlier error: group world op "
                                 "all_gather step 0: timed out after 1s"),
            std::string::npos)
      << later;
  const absl::Time destroy = absl::Now();
  gather.reset();
  reduce.reset();
  comm->reset();
  EXPECT_LT(absl::Now() - destroy, absl::Seconds(2)) << "the destructor waited for the stream";
  // The held stream drains (the aborted collectives end at once) without a CUDA error.
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

}  // namespace
}  // namespace shardline::fsdp
