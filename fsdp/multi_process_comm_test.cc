// The communicators across real processes on loopback: each rank is a comm_worker process
// started by RunRanks (fsdp/testing/process_launcher.h).
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "fsdp/layout.h"
#include "fsdp/testing/process_launcher.h"
#include "gtest/gtest.h"

namespace shardline::fsdp {
namespace {

using testing::RunfilePath;
using testing::RunRanks;
using testing::RunRanksOptions;
using testing::RunRanksResult;

const std::string& Worker() {
  static const std::string path = RunfilePath("fsdp/testing/comm_worker");
  return path;
}

void ExpectCollectivesOk(int world, int shard_degree) {
  SCOPED_TRACE(absl::StrCat("W=", world, " shard_degree=", shard_degree));
  RunRanksResult result = RunRanks(
      Worker(), world, {"--scenario=collectives", absl::StrCat("--shard_degree=", shard_degree)},
      absl::Seconds(120));
  ASSERT_TRUE(result.AllSucceeded()) << result.Summary();
  const ParallelLayout layout =
      ParallelLayout::ForShape(world, shard_degree == 0 ? world : shard_degree).value();
  for (const auto& rank : result.ranks) {
    EXPECT_NE(rank.output.find("collectives ok world"), std::string::npos) << rank.output;
    EXPECT_NE(rank.output.find(
                  absl::StrCat("collectives ok shard[", layout.ReplicateIndex(rank.rank), "]")),
              std::string::npos)
        << rank.output;
    EXPECT_NE(rank.output.find(
                  absl::StrCat("collectives ok replicate[", layout.ShardIndex(rank.rank), "]")),
              std::string::npos)
        << rank.output;
  }
}

TEST(MultiProcessComm, CollectivesExactForTwoRanks) { ExpectCollectivesOk(2, 0); }
TEST(MultiProcessComm, CollectivesExactForThreeRanks) { ExpectCollectivesOk(3, 0); }
TEST(MultiProcessComm, CollectivesExactForFourRanks) { ExpectCollectivesOk(4, 0); }
TEST(MultiProcessComm, ShardAndReplicateGroupsOfFourRanksInTwos) { ExpectCollectivesOk(4, 2); }

TEST(MultiProcessComm, BootstrapThroughAFileStore) {
  const char* tmp = getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/file_store_", getpid());
  RunRanksOptions options;
  options.timeout = absl::Seconds(120);
  options.start_store = false;
  RunRanksResult result = RunRanks(
      Worker(), 3,
      {"--scenario=collectives", "--shard_degree=0", absl::StrCat("--file_store_dir=", dir)},
      options);
  ASSERT_TRUE(result.AllSucceeded()) << result.Summary();
  for (const auto& rank : result.ranks) {
    EXPECT_NE(rank.output.find("collectives ok world"), std::string::npos) << rank.output;
  }
}

// Parses "RESULT code=X elapsed_ms=N message=M" from a rank's output.
struct Outcome {
  std::string code;
  int64_t elapsed_ms = -1;
  std::string message;
};
Outcome ParseOutcome(const std::string& output) {
  Outcome o;
  const size_t at = output.find("RESULT code=");
  if (at == std::string::npos) return o;
  const std::string line = output.substr(at, output.find('\n', at) - at);
  const size_t code_end = line.find(' ', 12);
  o.code = line.substr(12, code_end - 12);
  const size_t ms = line.find("elapsed_ms=");
  const size_t ms_end = line.find(' ', ms);
  (void)absl::SimpleAtoi(line.substr(ms + 11, ms_end - ms - 11), &o.elapsed_ms);
  const size_t msg = line.find("message=");
  if (msg != std::string::npos) o.message = line.substr(msg + 8);
  return o;
}

TEST(MultiProcessComm, PeerKilledMidCollectiveFailsOthersWithinTimeout) {
  for (int world : {2, 3, 4}) {
    SCOPED_TRACE(absl::StrCat("W=", world));
    constexpr int kTimeoutMs = 5000;
    const int victim = world - 1;
    RunRanksResult result = RunRanks(Worker(), world,
                                     {"--scenario=kill", absl::StrCat("--victim=", victim),
                                      absl::StrCat("--timeout_ms=", kTimeoutMs)},
                                     absl::Seconds(60));
    for (const auto& rank : result.ranks) {
      if (rank.rank == victim) {
        EXPECT_EQ(rank.exit_code, -9) << result.Summary();
        continue;
      }
      EXPECT_EQ(rank.exit_code, 0) << result.Summary();
      EXPECT_FALSE(rank.timed_out);
      Outcome o = ParseOutcome(rank.output);
      std::cerr << "W=" << world << " rank " << rank.rank << ": " << o.code << " after "
                << o.elapsed_ms << " ms: " << o.message << "\n";
      EXPECT_TRUE(o.code == "UNAVAILABLE" || o.code == "DEADLINE_EXCEEDED")
          << "rank " << rank.rank << ": " << rank.output;
      EXPECT_EQ(o.message.rfind("group world op all_reduce step 7: ", 0), 0u)
          << "rank " << rank.rank << ": " << rank.output;
      EXPECT_GE(o.elapsed_ms, 0) << rank.output;
      // "Within the timeout": the collective's own timeout plus scheduling slack.
      EXPECT_LT(o.elapsed_ms, kTimeoutMs + 3000) << rank.output;
    }
  }
}

TEST(MultiProcessComm, StalledPeerMakesOthersTimeOutNamingGroupOpAndStep) {
  constexpr int kWorld = 3;
  constexpr int kTimeoutMs = 2000;
  RunRanksResult result =
      RunRanks(Worker(), kWorld,
               {"--scenario=stall", "--victim=1", absl::StrCat("--timeout_ms=", kTimeoutMs)},
               absl::Seconds(60));
  ASSERT_TRUE(result.AllSucceeded()) << result.Summary();
  int deadline_exceeded = 0;
  for (const auto& rank : result.ranks) {
    if (rank.rank == 1) continue;
    Outcome o = ParseOutcome(rank.output);
    std::cerr << "rank " << rank.rank << ": " << o.code << " after " << o.elapsed_ms
              << " ms: " << o.message << "\n";
    // The first to give up closes its connections, which a slower survivor may see first.
    EXPECT_TRUE(o.code == "DEADLINE_EXCEEDED" || o.code == "UNAVAILABLE") << rank.output;
    EXPECT_EQ(o.message.rfind("group world op all_reduce step 3: ", 0), 0u) << rank.output;
    EXPECT_LT(o.elapsed_ms, kTimeoutMs + 3000) << rank.output;
    if (o.code == "DEADLINE_EXCEEDED") {
      ++deadline_exceeded;
      EXPECT_NE(o.message.find("timed out after 2s"), std::string::npos) << rank.output;
      EXPECT_GE(o.elapsed_ms, kTimeoutMs - 100) << rank.output;
    }
  }
  EXPECT_GE(deadline_exceeded, 1) << result.Summary();
}

}  // namespace
}  // namespace shardline::fsdp
