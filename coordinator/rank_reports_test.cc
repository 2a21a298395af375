#include "coordinator/rank_reports.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace shardline::coordinator {
namespace {

JobStatus Running() {
  JobStatus st;
  st.set_job_id("job-1");
  st.set_state(RUNNING);
  st.set_attempt(2);
  st.set_world_size(2);
  st.set_total_steps(100);
  return st;
}

ProgressReport Progress(int rank, int64_t step, int64_t memory) {
  ProgressReport r;
  r.set_job_id("job-1");
  r.set_attempt(2);
  r.set_rank(rank);
  r.set_step(step);
  r.set_loss(2.5);
  r.set_tokens_per_s(1000);
  r.set_step_time_s(0.5);
  r.set_peak_memory_bytes(memory);
  r.set_val_loss(std::nan(""));
  return r;
}

TEST(RankReports, OnlyRanksOfTheRunningAttemptReport) {
  JobStatus st = Running();
  EXPECT_TRUE(CheckReportSource(st, 2, 1).ok());
  absl::Status s = CheckReportSource(st, 1, 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "job job-1 attempt 1 is not running (job is RUNNING at attempt 2)");
  s = CheckReportSource(st, 2, 2);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "rank: 2 outside world of 2");
  EXPECT_EQ(CheckReportSource(st, 2, -1).code(), absl::StatusCode::kInvalidArgument);
  st.set_state(PENDING);
  s = CheckReportSource(st, 2, 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "job job-1 attempt 2 is not running (job is PENDING at attempt 2)");
}

TEST(RankReports, RankZeroSetsProgressOtherRanksOnlyRaiseTheirPeakMemory) {
  JobStatus st = Running();
  auto change = ApplyProgress(Progress(0, 20, 100), &st);
  ASSERT_TRUE(change.ok()) << change.status();
  EXPECT_EQ(*change, ProgressChange::kProgress);
  EXPECT_EQ(st.step(), 20);
  EXPECT_EQ(st.loss(), 2.5);
  EXPECT_EQ(st.tokens_per_s(), 1000);
  EXPECT_EQ(st.eta_s(), 40);    // 80 steps left at 0.5 s
  EXPECT_EQ(st.val_loss(), 0);  // NaN: no evaluation this step
  ASSERT_EQ(st.per_rank_peak_memory_bytes_size(), 2);
  EXPECT_EQ(st.per_rank_peak_memory_bytes(0), 100);
  EXPECT_EQ(*ApplyProgress(Progress(1, 20, 50), &st), ProgressChange::kPeakMemory);
  EXPECT_EQ(*ApplyProgress(Progress(1, 21, 40), &st), ProgressChange::kNone);
  EXPECT_EQ(st.per_rank_peak_memory_bytes(1), 50);
  EXPECT_EQ(st.step(), 20);
  ProgressReport last = Progress(0, 100, 10);
  last.set_val_loss(2.25);
  last.set_sample("to be");
  EXPECT_EQ(*ApplyProgress(last, &st), ProgressChange::kProgress);
  EXPECT_EQ(st.val_loss(), 2.25);
  EXPECT_EQ(st.sample(), "to be");
  EXPECT_EQ(st.eta_s(), 0);
  EXPECT_EQ(st.per_rank_peak_memory_bytes(0), 100);  // a peak never goes down
}

TEST(RankReports, NegativeStepOrMemoryIsInvalidAndChangesNothing) {
  JobStatus st = Running();
  const JobStatus before = st;
  for (const ProgressReport& r : {Progress(0, -1, 0), Progress(1, 0, -5)}) {
    auto change = ApplyProgress(r, &st);
    EXPECT_EQ(change.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(change.status().message(),
              absl::StrCat("progress report: step and peak_memory_bytes must be >= 0, got step ",
                           r.step(), ", peak_memory_bytes ", r.peak_memory_bytes()));
  }
  EXPECT_EQ(st.DebugString(), before.DebugString());
}

}  // namespace
}  // namespace shardline::coordinator
