// Runs on every machine where the NCCL backend is built (no GPU needed): linking
// :comm_backends registers NCCL with CreateCommunicators, and a binary that carries LibTorch's
// CUDA libraries still starts on a machine without a GPU.
#include <string>

#include "fsdp/communicators.h"
#include "fsdp/tcp_kv_store.h"
#include "gtest/gtest.h"

namespace shardline::fsdp {
namespace {

TEST(NcclRegistration, NcclBackendIsLinkedAndFailsCleanlyWithoutPeersOrGpu) {
  TcpKvStore::Options o;
  o.serve = true;
  auto store = TcpKvStore::Create(o);
  ASSERT_TRUE(store.ok()) << store.status();
  CommOptions options;
  options.backend = CommBackend::kNccl;
  options.timeout = absl::Seconds(2);
  // Rank 0 of 2; rank 1 never comes. Without a GPU: UNAVAILABLE ("no CUDA device"); with one:
  // DEADLINE_EXCEEDED waiting for the peer. Never FAILED_PRECONDITION (= not linked).
  auto groups = CreateCommunicators(2, 2, 0, store->get(), options);
  ASSERT_FALSE(groups.ok());
  EXPECT_TRUE(groups.status().code() == absl::StatusCode::kUnavailable ||
              groups.status().code() == absl::StatusCode::kDeadlineExceeded)
      << groups.status();
  EXPECT_EQ(groups.status().message().rfind("group world op connect step 0: ", 0), 0u)
      << groups.status();
}

}  // namespace
}  // namespace shardline::fsdp
