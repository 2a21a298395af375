// Runs on every machine where the NCCL backend is built (no GPU needed): linking
// :comm_backends registers NCCL with CreateCommGroups, and a binary that carries LibTorch's
// CUDA libraries still starts on a machine without a GPU.
#include <string>
#include <thread>
#include <vector>

#include "fsdp/comm_groups.h"
#include "fsdp/tcp_kv_store.h"
#include "gtest/gtest.h"

namespace shardline::fsdp {
namespace {

TEST(NcclRegistration, NcclBackendIsLinkedAndFailsCleanlyWithoutGpus) {
  TcpKvStore::Options o;
  o.serve = true;
  auto store = TcpKvStore::Create(o);
  ASSERT_TRUE(store.ok()) << store.status();
  // Two ranks on this machine: without a GPU, UNAVAILABLE ("no CUDA device"); with one GPU,
  // NCCL refuses two ranks on it (UNAVAILABLE) or they time out. Never FAILED_PRECONDITION,
  // which would mean the backend is not linked.
  absl::Status status[2];
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      CommOptions options;
      options.backend = CommBackend::kNccl;
      options.timeout = absl::Seconds(5);
      status[rank] =
          CreateCommGroups(*ParallelLayout::Create(2, "FULL_SHARD", 0), rank, store->get(), options)
              .status();
    });
  }
  for (std::thread& t : threads) t.join();
  for (const absl::Status& s : status) {
    EXPECT_TRUE(s.code() == absl::StatusCode::kUnavailable ||
                s.code() == absl::StatusCode::kDeadlineExceeded)
        << s;
    EXPECT_EQ(s.message().rfind("group world op connect step 0: ", 0), 0u) << s;
  }
}

}  // namespace
}  // namespace shardline::fsdp
