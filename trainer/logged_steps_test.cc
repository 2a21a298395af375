#include "trainer/logged_steps.h"

#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "trainer/metrics.h"

namespace shardline::trainer {
namespace {

std::string Path(const std::string& name) {
  return std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
}

void Append(const std::string& path, int64_t step, double loss, bool newline = true) {
  StepMetrics m;
  m.step = step;
  m.loss = loss;
  m.tokens_per_s = 100;
  std::ofstream(path, std::ios::app) << MetricsToJson(m) << (newline ? "\n" : "");
}

TEST(LoggedSteps, ReadsTheTrainersOwnLinesAsTheDaemonWouldUntilAcknowledged) {
  const std::string path = Path("metrics-rank-0.jsonl");
  std::remove(path.c_str());
  LoggedSteps steps(path);
  EXPECT_TRUE(steps.UpTo(10).empty());  // no file yet
  for (int64_t s = 1; s <= 4; ++s) Append(path, s, 5.0 - s);
  std::vector<ProgressReport> up_to_3 = steps.UpTo(3);
  ASSERT_EQ(up_to_3.size(), 3u);
  EXPECT_EQ(up_to_3[2].step(), 3);
  EXPECT_DOUBLE_EQ(up_to_3[2].loss(), 2.0);
  EXPECT_DOUBLE_EQ(up_to_3[2].tokens_per_s(), 100);
  // Not acknowledged (the commit's RPC failed): sent again with the next try.
  EXPECT_EQ(steps.UpTo(3).size(), 3u);
  steps.Acknowledge(3);
  ASSERT_EQ(steps.UpTo(10).size(), 1u);  // step 4 only
  // A half-written line waits for its newline.
  Append(path, 5, 0.5, /*newline=*/false);
  EXPECT_EQ(steps.UpTo(10).size(), 1u);
  std::ofstream(path, std::ios::app) << "\n";
  EXPECT_EQ(steps.UpTo(10).back().step(), 5);
}

TEST(LoggedSteps, ACommitOfALoggedStepWaitsForItsLine) {
  const std::string path = Path("metrics-wait.jsonl");
  std::remove(path.c_str());
  Append(path, 1, 3.0);
  LoggedSteps steps(path);
  std::thread writer([&] {
    absl::SleepFor(absl::Milliseconds(100));
    Append(path, 2, 2.0);
  });
  std::vector<ProgressReport> got = steps.UpTo(2, /*wait_for_step=*/true);
  writer.join();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got.back().step(), 2);
  // A step that never comes: the wait is bounded.
  const absl::Time start = absl::Now();
  EXPECT_EQ(steps.UpTo(7, true, absl::Milliseconds(50)).size(), 2u);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

}  // namespace
}  // namespace shardline::trainer
