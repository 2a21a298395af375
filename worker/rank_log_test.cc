#include "worker/rank_log.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"

namespace shardline::worker {
namespace {

std::string TempPath(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  return std::string(base ? base : "/tmp") + "/" + name;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(RankLog, RotatesIntoTwoFilesSoTheDiskHoldsAtMostTwiceTheCap) {
  RankLog::Options o;
  o.path = TempPath("rotate.log");
  o.max_file_bytes = 100;
  auto log = RankLog::Open(o);
  ASSERT_TRUE(log.ok()) << log.status();
  for (int i = 0; i < 100; ++i) (*log)->Write("line " + std::to_string(1000 + i) + "\n");  // 10 B
  const std::string current = ReadFile(o.path);
  const std::string previous = ReadFile(o.path + ".1");
  EXPECT_LE(current.size(), 100u);
  EXPECT_EQ(previous.size(), 100u);
  EXPECT_EQ(current.substr(current.size() - 10), "line 1099\n");
  EXPECT_EQ(previous.substr(previous.size() - 10),
            "line " + std::to_string(1099 - current.size() / 10) + "\n");
  EXPECT_FALSE(std::filesystem::exists(o.path + ".2"));
  // The tail reads across both files, whole lines only.
  const std::string tail = (*log)->Tail(25);
  EXPECT_EQ(tail, "line 1098\nline 1099\n");
}

TEST(RankLog, QueuesWholeLinesCutsLongOnesAndShipsInOrder) {
  RankLog::Options o;
  o.path = TempPath("queue.log");
  o.max_line_bytes = 8;
  auto log = RankLog::Open(o);
  ASSERT_TRUE(log.ok());
  (*log)->Write("one\ntw");
  (*log)->Write("o\r\nthis line is too long\npart");
  RankLog::Pending p = (*log)->Peek(1 << 20);
  EXPECT_EQ(p.lines, (std::vector<std::string>{"one", "two", "this lin"}));
  EXPECT_FALSE((*log)->Drained());
  (*log)->Commit(2, p.dropped);
  (*log)->Finish();  // the partial last line counts at the end
  p = (*log)->Peek(1 << 20);
  EXPECT_EQ(p.lines, (std::vector<std::string>{"this lin", "part"}));
  (*log)->Commit(p.lines.size(), p.dropped);
  EXPECT_TRUE((*log)->Drained());
}

TEST(RankLog, AnUnreachableCoordinatorCostsTheOldestLinesCounted) {
  RankLog::Options o;
  o.path = TempPath("drop.log");
  o.max_unshipped_bytes = 20;
  auto log = RankLog::Open(o);
  ASSERT_TRUE(log.ok());
  for (int i = 0; i < 10; ++i) (*log)->Write("line" + std::to_string(i) + "\n");  // 5 B each
  RankLog::Pending p = (*log)->Peek(1 << 20);
  EXPECT_EQ(p.lines, (std::vector<std::string>{"line6", "line7", "line8", "line9"}));
  EXPECT_EQ(p.dropped, 6);
  (*log)->Commit(p.lines.size(), p.dropped);
  EXPECT_EQ((*log)->Peek(1 << 20).dropped, 0);
  // Everything still went to the file.
  EXPECT_EQ(ReadFile(o.path).size(), 60u);
}

TEST(RankLog, ReadsAPipeUntilEveryWriterClosedIt) {
  RankLog::Options o;
  o.path = TempPath("pipe.log");
  auto log = RankLog::Open(o);
  ASSERT_TRUE(log.ok());
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  (*log)->Start(fds[0]);
  ASSERT_EQ(write(fds[1], "hello\nworld", 11), 11);
  close(fds[1]);
  ASSERT_TRUE((*log)->WaitForEnd(absl::Seconds(10)));
  EXPECT_EQ((*log)->Peek(1 << 20).lines, (std::vector<std::string>{"hello", "world"}));
  EXPECT_EQ(ReadFile(o.path), "hello\nworld");
}

}  // namespace
}  // namespace shardline::worker
