// NcclCommunicator on the one GPU a test machine has. NCCL refuses two ranks on the same GPU,
// so collectives are checked on single-rank groups (every op, every dtype, stream ordering);
// the bootstrap timeout uses a two-rank group whose second rank never comes.
#include "fsdp/nccl_communicator.h"

#include <ATen/ATen.h>
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

}  // namespace
}  // namespace shardline::fsdp
