#include "coordinator/core/rank_reports.h"

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

TEST(RankReports, TheLeaderSetsProgressOtherRanksOnlyRaiseTheirPeakMemory) {
  JobStatus st = Running();
  auto change = ApplyProgress(Progress(0, 20, 100), 0, &st);
  ASSERT_TRUE(change.ok()) << change.status();
  EXPECT_EQ(*change, ProgressChange::kProgress);
  EXPECT_EQ(st.step(), 20);
  EXPECT_EQ(st.loss(), 2.5);
  EXPECT_EQ(st.tokens_per_s(), 1000);
  EXPECT_EQ(st.eta_s(), 40);    // 80 steps left at 0.5 s
  EXPECT_EQ(st.val_loss(), 0);  // NaN: no evaluation this step
  ASSERT_EQ(st.per_rank_peak_memory_bytes_size(), 2);
  EXPECT_EQ(st.per_rank_peak_memory_bytes(0), 100);
  EXPECT_EQ(*ApplyProgress(Progress(1, 20, 50), 0, &st), ProgressChange::kPeakMemory);
  EXPECT_EQ(*ApplyProgress(Progress(1, 21, 40), 0, &st), ProgressChange::kNone);
  EXPECT_EQ(st.per_rank_peak_memory_bytes(1), 50);
  EXPECT_EQ(st.step(), 20);
  ProgressReport last = Progress(0, 100, 10);
  last.set_val_loss(2.25);
  last.set_sample("to be");
  EXPECT_EQ(*ApplyProgress(last, 0, &st), ProgressChange::kProgress);
  EXPECT_EQ(st.val_loss(), 2.25);
  EXPECT_EQ(st.sample(), "to be");
  EXPECT_EQ(st.eta_s(), 0);
  EXPECT_EQ(st.per_rank_peak_memory_bytes(0), 100);  // a peak never goes down
}

TEST(RankReports, WithReplicaGroupsTheLowestLiveGroupsFirstRankLeadsTheProgress) {
  JobStatus st = Running();
  st.set_world_size(4);                 // S = 2: groups 0 (ranks 0-1) and 1 (ranks 2-3)
  EXPECT_EQ(ProgressLeader(st, 2), 0);  // no fault tolerance: rank 0
  st.add_live_replica_groups(0);
  st.add_live_replica_groups(1);
  EXPECT_EQ(ProgressLeader(st, 2), 0);
  st.clear_live_replica_groups();
  st.add_live_replica_groups(1);  // group 0 lost: ranks 2-3 train on
  ASSERT_EQ(ProgressLeader(st, 2), 2);
  EXPECT_EQ(*ApplyProgress(Progress(1, 12, 10), 2, &st, 2), ProgressChange::kPeakMemory);
  EXPECT_EQ(*ApplyProgress(Progress(3, 12, 10), 2, &st, 2), ProgressChange::kPeakMemory);
  EXPECT_EQ(st.step(), 0);
  EXPECT_EQ(*ApplyProgress(Progress(2, 13, 10), 2, &st, 2), ProgressChange::kProgress);
  EXPECT_EQ(st.step(), 13);
}

// The chaos soak (#30) froze the daemon of group 0 (rank 0, the leader) while its trainers
// trained on with group 1: the steps of the freeze reached the coordinator only from rank 0's
// backlog, after group 0 was lost and rank 2 led, and were dropped for good.
TEST(RankReports, WithReplicaGroupsAnyGroupsFirstRankAheadOfTheJobCarriesTheStep) {
  JobStatus st = Running();
  st.set_world_size(4);  // S = 2
  st.add_live_replica_groups(0);
  st.add_live_replica_groups(1);
  ASSERT_EQ(*ApplyProgress(Progress(0, 14, 10), 0, &st, 2), ProgressChange::kProgress);
  for (int64_t step = 15; step <= 20; ++step) {  // rank 0's reports held up; rank 2's arrive
    EXPECT_EQ(*ApplyProgress(Progress(2, step, 10), 0, &st, 2), ProgressChange::kProgress);
    EXPECT_EQ(st.step(), step);
  }
  // A step the job has: no second point from a non-leader, and the step does not go back.
  EXPECT_EQ(*ApplyProgress(Progress(2, 18, 10), 0, &st, 2), ProgressChange::kNone);
  EXPECT_EQ(*ApplyProgress(Progress(3, 21, 0), 0, &st, 2), ProgressChange::kNone);  // not first
  EXPECT_EQ(st.step(), 20);
  // The leader's own late report of a step rank 2 carried fills the series only (where it
  // lacks the step): the job's step does not go back.
  EXPECT_EQ(*ApplyProgress(Progress(0, 15, 10), 0, &st, 2), ProgressChange::kBackfill);
  EXPECT_EQ(st.step(), 20);
  // Without replica groups (shard_degree 0: the caller's default) only the leader counts.
  JobStatus plain = Running();
  EXPECT_EQ(*ApplyProgress(Progress(1, 3, 0), 0, &plain), ProgressChange::kNone);
  EXPECT_EQ(plain.step(), 0);
}

// Found by a fresh-clone run (dashboard_browser_test): group 1's first rank carried the last
// step before rank 0, whose report of that step holds the final sample (only the leader
// samples); the sample must still reach the status.
TEST(RankReports, TheLeadersSampleOfAStepAnotherGroupCarriedFillsTheStatus) {
  JobStatus st = Running();
  st.set_world_size(4);  // S = 2
  st.add_live_replica_groups(0);
  st.add_live_replica_groups(1);
  ASSERT_EQ(*ApplyProgress(Progress(0, 99, 10), 0, &st, 2), ProgressChange::kProgress);
  ASSERT_EQ(*ApplyProgress(Progress(2, 100, 10), 0, &st, 2), ProgressChange::kProgress);
  ProgressReport last = Progress(0, 100, 10);
  last.set_sample("To be, or not");
  EXPECT_EQ(*ApplyProgress(last, 0, &st, 2), ProgressChange::kSample);
  EXPECT_EQ(st.sample(), "To be, or not");
  EXPECT_EQ(st.step(), 100);
  EXPECT_EQ(*ApplyProgress(last, 0, &st, 2), ProgressChange::kBackfill);  // sent again
  // A sample of an older step (a resent report) does not replace the status's.
  ProgressReport old = Progress(0, 99, 10);
  old.set_sample("older");
  EXPECT_EQ(*ApplyProgress(old, 0, &st, 2), ProgressChange::kBackfill);
  EXPECT_EQ(st.sample(), "To be, or not");
}

// Issue #30: after a coordinator restart the worker daemons send again every report above the
// job's durable step; the job's step (restored, or moved on by newer reports) may be past them.
TEST(RankReports, AStepSentAgainByTheAttemptThatSetTheStepFillsWithoutMovingItBack) {
  JobStatus st = Running();
  ASSERT_EQ(*ApplyProgress(Progress(0, 20, 10), 0, &st), ProgressChange::kProgress);
  EXPECT_EQ(st.step_attempt(), 2);
  ProgressReport again = Progress(0, 17, 10);
  again.set_loss(9.5);
  EXPECT_EQ(*ApplyProgress(again, 0, &st), ProgressChange::kBackfill);
  EXPECT_EQ(*ApplyProgress(Progress(0, 20, 10), 0, &st), ProgressChange::kBackfill);
  EXPECT_EQ(st.step(), 20);
  EXPECT_EQ(st.loss(), 2.5);  // the status keeps the newest step's figures
  EXPECT_EQ(*ApplyProgress(Progress(1, 17, 0), 0, &st), ProgressChange::kNone);  // not leader
  // A later attempt resumed from an older checkpoint: its steps move the job's step back.
  st.set_attempt(3);
  ProgressReport resumed = Progress(0, 11, 10);
  resumed.set_attempt(3);
  EXPECT_EQ(*ApplyProgress(resumed, 0, &st), ProgressChange::kProgress);
  EXPECT_EQ(st.step(), 11);
  EXPECT_EQ(st.step_attempt(), 3);
}

TEST(RankReports, NegativeStepOrMemoryIsInvalidAndChangesNothing) {
  JobStatus st = Running();
  const JobStatus before = st;
  for (const ProgressReport& r : {Progress(0, -1, 0), Progress(1, 0, -5)}) {
    auto change = ApplyProgress(r, 0, &st);
    EXPECT_EQ(change.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(change.status().message(),
              absl::StrCat("progress report: step and peak_memory_bytes must be >= 0, got step ",
                           r.step(), ", peak_memory_bytes ", r.peak_memory_bytes()));
  }
  EXPECT_EQ(st.DebugString(), before.DebugString());
}

CheckpointReport Commit(int64_t step) {
  CheckpointReport r;
  r.set_job_id("job-1");
  r.set_attempt(2);
  r.set_step(step);
  r.set_path(absl::StrCat("/ckpt/job-1/step_", step));
  r.add_files("shard_00000.bin");
  r.add_files("MANIFEST.json");
  r.set_expected_files(1);
  r.set_manifest_committed(true);
  return r;
}

TEST(RankReports, CommittedCheckpointRaisesLatestStepNotesItAndRetiresOldSteps) {
  JobRecord job;
  *job.mutable_status() = Running();
  job.mutable_status()->mutable_spec()->mutable_checkpoint()->set_keep_last(1);
  job.set_shard_degree(2);
  CheckpointRegistry registry;
  const absl::Time now = absl::FromUnixSeconds(1000);

  auto first = ApplyCheckpointReport(Commit(10), &job, &registry, now);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(first->committed);
  EXPECT_TRUE(first->record.info().committed());
  EXPECT_EQ(first->record.info().shard_degree(), 2);
  EXPECT_TRUE(first->retired.empty());
  EXPECT_EQ(job.status().latest_checkpoint_step(), 10);
  ASSERT_GT(job.status().events_size(), 0);
  EXPECT_EQ(job.status().events(job.status().events_size() - 1).message(),
            "step 10 at /ckpt/job-1/step_10 (1 data files)");

  auto second = ApplyCheckpointReport(Commit(20), &job, &registry, now);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(job.status().latest_checkpoint_step(), 20);
  ASSERT_EQ(second->retired.size(), 1u);  // keep_last 1
  EXPECT_EQ(second->retired[0], (std::pair<std::string, int64_t>{"job-1", 10}));
}

TEST(RankReports, ShardReportBeforeTheCommitChangesOnlyTheRecord) {
  JobRecord job;
  *job.mutable_status() = Running();
  CheckpointRegistry registry;
  CheckpointReport shard = Commit(10);
  shard.clear_files();
  shard.add_files("shard_00000.bin");
  shard.set_manifest_committed(false);
  auto change = ApplyCheckpointReport(shard, &job, &registry, absl::FromUnixSeconds(1000));
  ASSERT_TRUE(change.ok()) << change.status();
  EXPECT_FALSE(change->committed);
  EXPECT_EQ(job.status().latest_checkpoint_step(), 0);
  EXPECT_EQ(job.status().events_size(), 0);

  CheckpointReport bad = Commit(-1);
  EXPECT_EQ(
      ApplyCheckpointReport(bad, &job, &registry, absl::FromUnixSeconds(1000)).status().code(),
      absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace shardline::coordinator
