#include "worker/metrics_tail.h"

#include <cstdlib>
#include <fstream>

#include "gtest/gtest.h"

namespace shardline::worker {
namespace {

TEST(MetricsTail, ReadsOnlyCompleteNewLines) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/metrics.jsonl";
  MetricsTail tail(path);
  EXPECT_TRUE(tail.Poll().empty());  // No file yet.

  std::ofstream out(path);
  out << R"({"step": 1, "loss": 5.5, "tokens_per_s": 100.5, "extra": [1,2]})"
      << "\n"
      << R"({"step": 2, "loss": 5.)";  // Half-written.
  out.flush();
  auto reports = tail.Poll();
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].step(), 1);
  EXPECT_DOUBLE_EQ(reports[0].loss(), 5.5);
  EXPECT_DOUBLE_EQ(reports[0].tokens_per_s(), 100.5);

  out << "25}\n"
      << "not json\n";
  out.flush();
  reports = tail.Poll();
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].step(), 2);
  EXPECT_DOUBLE_EQ(reports[0].loss(), 5.25);
  EXPECT_EQ(tail.bad_lines(), 1);
  EXPECT_TRUE(tail.Poll().empty());
}

}  // namespace
}  // namespace shardline::worker
