#include "fsdp/testing/process_launcher.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace shardline::fsdp::testing {
namespace {

// RunRanks appends "--rank=R --world_size=W [--store_host=H --store_port=P]" after the given
// arguments; with "sh -c SCRIPT sh" they arrive in the script as $1, $2, ...
RunRanksResult RunScript(int world, const std::string& script, RunRanksOptions options = {}) {
  return RunRanks("/bin/sh", world, {"-c", script, "sh"}, options);
}

TEST(RunRanks, CapturesOutputAndExitCodePerRank) {
  RunRanksResult result =
      RunScript(3, "echo \"out $1 $2\"; echo \"err $1\" >&2; r=${1#--rank=}; exit $((r * 2))");
  ASSERT_EQ(result.ranks.size(), 3u);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(result.ranks[r].rank, r);
    EXPECT_EQ(result.ranks[r].exit_code, 2 * r);
    EXPECT_FALSE(result.ranks[r].timed_out);
    EXPECT_NE(result.ranks[r].output.find(absl::StrCat("out --rank=", r, " --world_size=3")),
              std::string::npos)
        << result.ranks[r].output;
    EXPECT_NE(result.ranks[r].output.find(absl::StrCat("err --rank=", r)), std::string::npos);
  }
  EXPECT_FALSE(result.AllSucceeded());
  EXPECT_NE(result.Summary().find("---- rank 2: exit 4"), std::string::npos) << result.Summary();
}

TEST(RunRanks, AllSucceededWhenEveryRankExitsZero) {
  RunRanksResult result = RunScript(2, "exit 0");
  EXPECT_TRUE(result.AllSucceeded()) << result.Summary();
}

TEST(RunRanks, PassesTheStoreAddress) {
  // $3 is --store_host=..., $4 --store_port=... (the multi-process tests connect to it).
  RunRanksResult result = RunScript(1, "echo \"$3 $4\"");
  ASSERT_TRUE(result.AllSucceeded()) << result.Summary();
  EXPECT_NE(result.ranks[0].output.find("--store_host=127.0.0.1 --store_port="), std::string::npos)
      << result.ranks[0].output;
}

TEST(RunRanks, KillsRanksStillRunningAtTheTimeout) {
  RunRanksOptions options;
  options.timeout = absl::Milliseconds(500);
  options.start_store = false;
  const absl::Time start = absl::Now();
  RunRanksResult result = RunScript(2, "if [ \"$1\" = --rank=1 ]; then exec sleep 60; fi", options);
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
  EXPECT_EQ(result.ranks[0].exit_code, 0);
  EXPECT_FALSE(result.ranks[0].timed_out);
  EXPECT_EQ(result.ranks[1].exit_code, -9);
  EXPECT_TRUE(result.ranks[1].timed_out);
  EXPECT_NE(result.Summary().find("(killed at timeout)"), std::string::npos);
}

TEST(RunRanks, ReportsDeathBySignalAsNegativeSignal) {
  RunRanksResult result = RunScript(1, "kill -TERM $$");
  EXPECT_EQ(result.ranks[0].exit_code, -15) << result.Summary();
}

TEST(RunRanks, PerRankArgumentsAndEnvironment) {
  RunRanksOptions options;
  options.start_store = false;
  options.env = {"SHARDLINE_LAUNCHER_TEST=hello"};
  options.per_rank_args = [](int rank) {
    return std::vector<std::string>{absl::StrCat("--victim=", rank == 1 ? "yes" : "no")};
  };
  RunRanksResult result = RunScript(2, "echo \"$1 $2 $SHARDLINE_LAUNCHER_TEST\"", options);
  ASSERT_TRUE(result.AllSucceeded()) << result.Summary();
  EXPECT_NE(result.ranks[0].output.find("--victim=no --rank=0 hello"), std::string::npos)
      << result.ranks[0].output;
  EXPECT_NE(result.ranks[1].output.find("--victim=yes --rank=1 hello"), std::string::npos)
      << result.ranks[1].output;
}

TEST(RunRanks, MissingBinaryExits127) {
  RunRanksResult result = RunRanks("/nonexistent/binary", 1, {}, absl::Seconds(10));
  EXPECT_EQ(result.ranks[0].exit_code, 127);
  EXPECT_NE(result.ranks[0].output.find("execve failed"), std::string::npos);
}

TEST(RunfilePath, UsesTestSrcdir) {
  const std::string path = RunfilePath("fsdp/testing/comm_worker");
  EXPECT_NE(path.find("fsdp/testing/comm_worker"), std::string::npos);
  if (getenv("TEST_SRCDIR") != nullptr) {
    EXPECT_EQ(path.rfind(getenv("TEST_SRCDIR"), 0), 0u) << path;
  }
}

}  // namespace
}  // namespace shardline::fsdp::testing
