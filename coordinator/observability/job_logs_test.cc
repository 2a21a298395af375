#include "coordinator/observability/job_logs.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace shardline::coordinator {
namespace {

RankLogChunk Chunk(const std::string& job, int attempt, int rank, std::vector<std::string> lines,
                   int64_t time_ms = 1000) {
  RankLogChunk c;
  c.set_job_id(job);
  c.set_attempt(attempt);
  c.set_rank(rank);
  c.set_time_unix_ms(time_ms);
  for (std::string& l : lines) c.add_lines(std::move(l));
  return c;
}

std::vector<std::string> Texts(const GetLogsResponse& r) {
  std::vector<std::string> out;
  for (const LogLine& l : r.lines()) out.push_back(l.text());
  return out;
}

GetLogsRequest All(const std::string& job) {
  GetLogsRequest r;
  r.set_job_id(job);
  r.set_all_ranks(true);
  return r;
}

TEST(JobLogs, LinesOfAllRanksComeInTheOrderTheyArrivedWithJobWideSeq) {
  JobLogs logs;
  logs.Append(Chunk("j", 1, 0, {"a0", "b0"}));
  logs.Append(Chunk("j", 1, 1, {"a1"}));
  logs.Append(Chunk("j", 1, 0, {"c0"}));
  const GetLogsResponse r = logs.Get(All("j"));
  EXPECT_EQ(Texts(r), (std::vector<std::string>{"a0", "b0", "a1", "c0"}));
  EXPECT_EQ(r.lines(2).rank(), 1);
  EXPECT_EQ(r.lines(3).seq(), 4);
  EXPECT_EQ(r.next_seq(), 4);
  EXPECT_FALSE(r.truncated());
  GetLogsRequest rank1 = All("j");
  rank1.set_all_ranks(false);
  rank1.set_rank(1);
  EXPECT_EQ(Texts(logs.Get(rank1)), (std::vector<std::string>{"a1"}));
  GetLogsRequest rank0 = All("j");
  rank0.set_all_ranks(false);  // rank 0 by default
  EXPECT_EQ(Texts(logs.Get(rank0)), (std::vector<std::string>{"a0", "b0", "c0"}));
}

TEST(JobLogs, ALineLongerThanTheRingIsCutSoTheRingKeepsItsBound) {
  JobLogs::Options o;
  o.bytes_per_rank = 1024;
  JobLogs logs(o);
  logs.Append(Chunk("j", 1, 0, {std::string(4 << 20, 'x')}));  // what one gRPC message holds
  EXPECT_LE(logs.total_bytes(), 1024);
  const GetLogsResponse r = logs.Get(All("j"));
  ASSERT_EQ(r.lines_size(), 1);
  EXPECT_EQ(r.lines(0).text(), std::string(1024 - 32, 'x'));
  // Below the ring's size, the daemon's 16 KiB cut applies.
  JobLogs big;
  big.Append(Chunk("j", 1, 0, {std::string(1 << 20, 'y')}));
  EXPECT_EQ(big.Get(All("j")).lines(0).text().size(), 16u << 10);
}

TEST(JobLogs, OneJobAloneNeverHoldsMoreThanTheTotalBound) {
  JobLogs::Options o;
  o.bytes_per_rank = 1024;
  o.max_total_bytes = 4096;
  JobLogs logs(o);
  // Many ranks and attempts of one job: each ring is within its bound, all of them are not.
  for (int attempt = 1; attempt <= 4; ++attempt) {
    for (int rank = 0; rank < 8; ++rank) {
      logs.Append(Chunk("j", attempt, rank, {std::string(900, 'a' + rank)}));
      EXPECT_LE(logs.total_bytes(), 4096) << "attempt " << attempt << " rank " << rank;
    }
  }
  const GetLogsResponse r = logs.Get(All("j"));
  ASSERT_FALSE(r.lines().empty());
  EXPECT_EQ(r.lines(r.lines_size() - 1).text(), std::string(900, 'a' + 7));  // the newest
  EXPECT_EQ(r.lines_size() + r.dropped_lines(), 32);  // the emptied rings count theirs dropped
}

TEST(JobLogs, ForgetDropsTheJobsLinesAndTheirBytes) {
  JobLogs logs;
  logs.Append(Chunk("gone", 1, 0, {"a", "b"}));
  logs.Append(Chunk("kept", 1, 0, {"c"}));
  const int64_t before = logs.total_bytes();
  logs.Forget("gone");
  logs.Forget("never-seen");
  EXPECT_TRUE(logs.Get(All("gone")).lines().empty());
  EXPECT_EQ(Texts(logs.Get(All("kept"))), (std::vector<std::string>{"c"}));
  EXPECT_LT(logs.total_bytes(), before);
  logs.Forget("kept");
  EXPECT_EQ(logs.total_bytes(), 0);
}

TEST(JobLogs, AFollowerGetsOnlyNewLinesAfterItsCursor) {
  JobLogs logs;
  logs.Append(Chunk("j", 1, 0, {"one", "two"}));
  GetLogsRequest req = All("j");
  GetLogsResponse r = logs.Get(req);
  req.set_after_seq(r.next_seq());
  EXPECT_EQ(logs.Get(req).lines_size(), 0);
  EXPECT_EQ(logs.Get(req).next_seq(), 2);
  logs.Append(Chunk("j", 1, 0, {"three"}));
  r = logs.Get(req);
  EXPECT_EQ(Texts(r), (std::vector<std::string>{"three"}));
  EXPECT_EQ(r.next_seq(), 3);
}

TEST(JobLogs, TailSinceAndAttemptSelect) {
  JobLogs logs;
  logs.Append(Chunk("j", 1, 0, {"old1", "old2"}, 1000));
  logs.Append(Chunk("j", 2, 0, {"new1", "new2", "new3"}, 5000));
  logs.Append(Chunk("j", 2, 1, {"r1"}, 5000));
  GetLogsRequest req = All("j");
  req.set_tail_lines(1);  // per rank (and attempt)
  EXPECT_EQ(Texts(logs.Get(req)), (std::vector<std::string>{"old2", "new3", "r1"}));
  req = All("j");
  req.set_since_unix_ms(5000);
  EXPECT_EQ(logs.Get(req).lines_size(), 4);
  req = All("j");
  req.set_attempt(1);
  EXPECT_EQ(Texts(logs.Get(req)), (std::vector<std::string>{"old1", "old2"}));
}

TEST(JobLogs, EachRankKeepsItsNewestLinesUnderItsByteCapAndCountsTheDropped) {
  JobLogs::Options o;
  o.bytes_per_rank = 10 * (32 + 4);  // ten 4-character lines
  JobLogs logs(o);
  for (int i = 0; i < 25; ++i) logs.Append(Chunk("j", 1, 0, {"l" + std::to_string(100 + i)}));
  RankLogChunk from_daemon = Chunk("j", 1, 0, {});
  from_daemon.set_dropped_lines(7);
  logs.Append(from_daemon);
  const GetLogsResponse r = logs.Get(All("j"));
  ASSERT_EQ(r.lines_size(), 10);
  EXPECT_EQ(r.lines(0).text(), "l115");
  EXPECT_EQ(r.lines(9).text(), "l124");
  EXPECT_EQ(r.dropped_lines(), 15 + 7);
  EXPECT_EQ(logs.total_bytes(), 10 * 36);
}

TEST(JobLogs, PastTheTotalCapTheLeastRecentlyWrittenJobGoesFirst) {
  JobLogs::Options o;
  o.max_total_bytes = 3 * 36;
  JobLogs logs(o);
  logs.Append(Chunk("old", 1, 0, {"aaaa"}));
  logs.Append(Chunk("mid", 1, 0, {"bbbb"}));
  logs.Append(Chunk("old", 1, 0, {"cccc"}));  // "old" written last now
  logs.Append(Chunk("new", 1, 0, {"dddd"}));  // over the cap: "mid" goes
  EXPECT_EQ(logs.Get(All("mid")).lines_size(), 0);
  EXPECT_EQ(logs.Get(All("old")).lines_size(), 2);
  EXPECT_EQ(logs.Get(All("new")).lines_size(), 1);
}

TEST(JobLogs, ALongAnswerIsCutAndTheNextCallGoesOn) {
  JobLogs::Options o;
  o.max_response_bytes = 3 * 36;
  JobLogs logs(o);
  logs.Append(Chunk("j", 1, 0, {"0001", "0002", "0003", "0004", "0005"}));
  GetLogsRequest req = All("j");
  GetLogsResponse r = logs.Get(req);
  EXPECT_TRUE(r.truncated());
  EXPECT_EQ(Texts(r), (std::vector<std::string>{"0001", "0002", "0003"}));
  req.set_after_seq(r.next_seq());
  r = logs.Get(req);
  EXPECT_FALSE(r.truncated());
  EXPECT_EQ(Texts(r), (std::vector<std::string>{"0004", "0005"}));
}

}  // namespace
}  // namespace shardline::coordinator
