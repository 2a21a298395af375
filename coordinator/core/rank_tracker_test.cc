#include "coordinator/core/rank_tracker.h"

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace shardline::coordinator {
namespace {

const absl::Time kStart = absl::FromUnixSeconds(1700000000);

// job-1 attempt 1: ranks 0 and 1 on worker w-a (node a), rank 2 on w-b (node b).
JobStatus Attempt() {
  JobStatus st;
  st.set_job_id("job-1");
  st.set_attempt(1);
  st.set_started_unix_ms(absl::ToUnixMillis(kStart));
  for (int r = 0; r < 3; ++r) {
    RankPlacement* p = st.add_placement();
    p->set_rank(r);
    p->set_worker_id(r < 2 ? "w-a" : "w-b");
    p->set_node_name(r < 2 ? "a" : "b");
  }
  return st;
}

RankStatus Rank(int rank, RankStatus::State state, int attempt = 1, int exit_code = 0,
                const std::string& tail = "") {
  RankStatus rs;
  rs.set_job_id("job-1");
  rs.set_attempt(attempt);
  rs.set_rank(rank);
  rs.set_state(state);
  rs.set_exit_code(exit_code);
  rs.set_log_tail(tail);
  return rs;
}

TEST(RankTracker, AckedRankLeftOutOfALaterHeartbeatIsLost) {
  RankTracker t;
  t.StartAttempt(Attempt());
  EXPECT_TRUE(t.IsRunning("job-1", 1));
  EXPECT_FALSE(t.IsRunning("job-1", 2));
  EXPECT_FALSE(t.HasRunningRanks("w-a"));
  const RankTracker::Observation seen = t.Observe("w-a", Rank(0, RankStatus::RUNNING));
  EXPECT_TRUE(seen.current);
  EXPECT_FALSE(seen.stop);
  EXPECT_TRUE(t.IsAcked("job-1", 0));
  EXPECT_FALSE(t.IsAcked("job-1", 1));
  EXPECT_TRUE(t.HasRunningRanks("w-a"));
  EXPECT_TRUE(t.LostRanks("w-a", {{"job-1", 0}}).empty());
  const std::vector<RankFailure> lost = t.LostRanks("w-a", {});
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].job_id, "job-1");
  EXPECT_EQ(lost[0].kind, "RANK_LOST");
  EXPECT_EQ(lost[0].reason,
            "rank 0 on node a is no longer reported by its worker (daemon restarted?)");
}

TEST(RankTracker, LostRanksNamesTheFirstMissingRankOncePerJob) {
  RankTracker t;
  t.StartAttempt(Attempt());
  t.Observe("w-a", Rank(0, RankStatus::RUNNING));
  t.Observe("w-a", Rank(1, RankStatus::STARTING));
  const std::vector<RankFailure> lost = t.LostRanks("w-a", {});
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].reason,
            "rank 0 on node a is no longer reported by its worker (daemon restarted?)");
}

TEST(RankTracker, WorkerSpeaksOnlyForItsOwnRanks) {
  RankTracker t;
  t.StartAttempt(Attempt());
  for (int rank : {2, 3, -1}) {
    const RankTracker::Observation seen = t.Observe("w-a", Rank(rank, RankStatus::RUNNING));
    EXPECT_FALSE(seen.current) << rank;
    EXPECT_FALSE(seen.stop) << rank;  // the attempt runs: nothing to stop
  }
  EXPECT_FALSE(t.IsAcked("job-1", 2));
  EXPECT_FALSE(t.HasRunningRanks("w-a"));
}

TEST(RankTracker, RanksArePlacedOnTheirWorkerForTheRunningAndTheLastEndedAttemptOnly) {
  RankTracker t;
  t.StartAttempt(Attempt());
  EXPECT_TRUE(t.PlacedOn("job-1", 1, 0, "w-a"));
  EXPECT_TRUE(t.PlacedOn("job-1", 1, 2, "w-b"));
  EXPECT_FALSE(t.PlacedOn("job-1", 1, 2, "w-a"));  // another worker's rank
  EXPECT_FALSE(t.PlacedOn("job-1", 1, 3, "w-a"));  // outside the world
  EXPECT_FALSE(t.PlacedOn("job-1", 2, 0, "w-a"));  // an attempt that has not started
  EXPECT_FALSE(t.PlacedOn("job-2", 1, 0, "w-a"));  // a job the tracker does not know
  // A replaced rank's old worker may still ship its last lines; the new one may too.
  t.ReplaceRank("job-1", 2, "w-c", "c", /*generation=*/1, kStart);
  EXPECT_TRUE(t.PlacedOn("job-1", 1, 2, "w-b"));
  EXPECT_TRUE(t.PlacedOn("job-1", 1, 2, "w-c"));
  // The ended attempt's ranks stay placed (late lines after the exit) until the next one ends.
  t.EndAttempt("job-1");
  EXPECT_TRUE(t.PlacedOn("job-1", 1, 0, "w-a"));
  EXPECT_FALSE(t.PlacedOn("job-1", 1, 0, "w-b"));
  JobStatus second = Attempt();
  second.set_attempt(2);
  second.mutable_placement(0)->set_worker_id("w-b");
  t.StartAttempt(second);
  EXPECT_TRUE(t.PlacedOn("job-1", 1, 0, "w-a"));
  EXPECT_TRUE(t.PlacedOn("job-1", 2, 0, "w-b"));
  EXPECT_FALSE(t.PlacedOn("job-1", 2, 0, "w-a"));
  t.EndAttempt("job-1");
  EXPECT_FALSE(t.PlacedOn("job-1", 1, 0, "w-a"));  // two attempts ago
  EXPECT_TRUE(t.PlacedOn("job-1", 2, 0, "w-b"));
  t.ForgetJob("job-1");
  EXPECT_FALSE(t.PlacedOn("job-1", 2, 0, "w-b"));
}

TEST(RankTracker, LiveRankOfAnAttemptThatIsOverGetsOneStopPerStream) {
  RankTracker t;
  t.StartAttempt(Attempt());
  EXPECT_TRUE(t.Observe("w-a", Rank(0, RankStatus::RUNNING, /*attempt=*/0)).stop);
  EXPECT_FALSE(t.Observe("w-a", Rank(1, RankStatus::RUNNING, /*attempt=*/0)).stop);
  EXPECT_TRUE(t.Observe("w-b", Rank(2, RankStatus::RUNNING, /*attempt=*/0)).stop);
  t.StreamOpened("w-a");
  EXPECT_TRUE(t.Observe("w-a", Rank(0, RankStatus::RUNNING, /*attempt=*/0)).stop);
  // An exited rank needs no STOP; a job that no longer runs at all is over too.
  EXPECT_FALSE(t.Observe("w-b", Rank(2, RankStatus::EXITED, /*attempt=*/5)).stop);
  t.EndAttempt("job-1");
  EXPECT_FALSE(t.IsRunning("job-1", 1));
  EXPECT_TRUE(t.Observe("w-b", Rank(2, RankStatus::RUNNING, /*attempt=*/1)).stop);
}

// A worker can list any (job, attempt) in its heartbeats; each unknown one used to get a STOP
// and a remembered entry, without end (issue #13).
TEST(RankTracker, MadeUpAttemptsInHeartbeatsGetAtMostTheStreamBoundOfStops) {
  RankTracker t;
  t.StartAttempt(Attempt());
  size_t stops = 0;
  for (int i = 0; i < 5000; ++i) {
    RankStatus rs = Rank(0, RankStatus::RUNNING, /*attempt=*/7);
    rs.set_job_id(absl::StrCat("made-up-", i));
    stops += t.Observe("w-a", rs).stop;
  }
  EXPECT_EQ(stops, RankTracker::kMaxStopsPerStream);
  // The bound is the worker's own: another worker's stale rank is still stopped, and w-a's
  // current ranks still count.
  EXPECT_TRUE(t.Observe("w-b", Rank(2, RankStatus::RUNNING, /*attempt=*/0)).stop);
  EXPECT_TRUE(t.Observe("w-a", Rank(0, RankStatus::RUNNING)).current);
  // A new stream starts from zero; so does a worker that died and came back.
  t.StreamOpened("w-a");
  EXPECT_TRUE(t.Observe("w-a", Rank(0, RankStatus::RUNNING, /*attempt=*/0)).stop);
  EXPECT_FALSE(t.Observe("w-b", Rank(2, RankStatus::RUNNING, /*attempt=*/0)).stop);
  t.WorkerDied("w-b", "b", absl::Seconds(5));
  EXPECT_TRUE(t.Observe("w-b", Rank(2, RankStatus::RUNNING, /*attempt=*/0)).stop);
  // A collected job's STOPs are forgotten: a later stale rank of it is stopped again.
  t.ForgetJob("job-1");
  EXPECT_TRUE(t.Observe("w-b", Rank(2, RankStatus::RUNNING, /*attempt=*/0)).stop);
}

TEST(RankTracker, ExitCodesAreSuccessOrRankFailedWithTheLastLogLine) {
  RankTracker t;
  t.StartAttempt(Attempt());
  t.Observe("w-a", Rank(0, RankStatus::RUNNING));
  const RankTracker::Observation ok = t.Observe("w-a", Rank(0, RankStatus::EXITED));
  EXPECT_TRUE(ok.current);
  EXPECT_TRUE(ok.exited_ok);
  EXPECT_FALSE(ok.failed.has_value());
  EXPECT_FALSE(t.HasRunningRanks("w-a"));  // an exited rank is no longer expected
  const RankTracker::Observation bad =
      t.Observe("w-a", Rank(1, RankStatus::EXITED, 1, 3, "line one\nRuntimeError: boom\n"));
  EXPECT_FALSE(bad.exited_ok);
  ASSERT_TRUE(bad.failed.has_value());
  EXPECT_EQ(bad.failed->job_id, "job-1");
  EXPECT_EQ(bad.failed->kind, "RANK_FAILED");
  EXPECT_EQ(bad.failed->reason, "rank 1 on node a exited with code 3: RuntimeError: boom");
  const RankTracker::Observation killed = t.Observe("w-b", Rank(2, RankStatus::EXITED, 1, -9));
  ASSERT_TRUE(killed.failed.has_value());
  EXPECT_EQ(killed.failed->reason, "rank 2 on node b was killed by signal 9");
}

TEST(RankTracker, AFailureReasonKeepsATrainerLogLinesMessageWithoutItsPrefix) {
  RankTracker t;
  t.StartAttempt(Attempt());
  t.Observe("w-b", Rank(2, RankStatus::RUNNING));
  // The prefix (level, time, rank, source) is left out: the reason names the rank already.
  const RankTracker::Observation logged = t.Observe(
      "w-b", Rank(2, RankStatus::EXITED, 1, 4,
                  "I1202 08:51:57.100 rank 2 ] step 1\n"
                  "E1202 08:51:57.690 rank 2 failure_exits.cc:11 ] training: peer lost\n"));
  ASSERT_TRUE(logged.failed.has_value());
  EXPECT_EQ(logged.failed->reason, "rank 2 on node b exited with code 4: training: peer lost");
}

TEST(RankTracker, CheckpointDirNotSharedExitIsAFailureNoRestartCanFix) {
  RankTracker t;
  t.StartAttempt(Attempt());
  t.Observe("w-b", Rank(2, RankStatus::RUNNING));
  const RankTracker::Observation seen = t.Observe(
      "w-b", Rank(2, RankStatus::EXITED, 1, 6, "checkpoint: checkpoint.dir /c is not shared\n"));
  ASSERT_TRUE(seen.failed.has_value());
  EXPECT_EQ(seen.failed->kind, "CHECKPOINT_DIR_NOT_SHARED");
  EXPECT_FALSE(seen.failed->restartable);
  EXPECT_EQ(seen.failed->reason,
            "rank 2 on node b exited with code 6: checkpoint: checkpoint.dir /c is not shared");
  // Every other failure may be transient.
  const RankTracker::Observation other =
      t.Observe("w-a", Rank(1, RankStatus::EXITED, 1, 4, "peer lost\n"));
  ASSERT_TRUE(other.failed.has_value());
  EXPECT_TRUE(other.failed->restartable);
}

TEST(RankTracker, RanksNotAckedWithinTheStartTimeoutFailTheAttempt) {
  RankTracker t;
  t.StartAttempt(Attempt());
  t.Observe("w-a", Rank(0, RankStatus::STARTING));
  EXPECT_TRUE(t.StartTimeouts(kStart + absl::Seconds(30), absl::Seconds(30)).empty());
  const std::vector<RankFailure> late =
      t.StartTimeouts(kStart + absl::Seconds(31), absl::Seconds(30));
  ASSERT_EQ(late.size(), 1u);
  EXPECT_EQ(late[0].job_id, "job-1");
  EXPECT_EQ(late[0].kind, "RANK_START_TIMEOUT");
  EXPECT_EQ(late[0].reason,
            "ranks [1 (a), 2 (b)] were not reported by their workers within 30s of the "
            "attempt's start");
  t.Observe("w-a", Rank(1, RankStatus::RUNNING));
  t.Observe("w-b", Rank(2, RankStatus::EXITED));
  EXPECT_TRUE(t.StartTimeouts(kStart + absl::Hours(1), absl::Seconds(30)).empty());
}

TEST(RankTracker, DeadWorkerFailsEveryAttemptWithRanksOnIt) {
  RankTracker t;
  t.StartAttempt(Attempt());
  JobStatus other = Attempt();
  other.set_job_id("job-2");
  for (RankPlacement& p : *other.mutable_placement()) p.set_worker_id("w-b");
  t.StartAttempt(other);
  t.Observe("w-a", Rank(0, RankStatus::RUNNING));
  const std::vector<RankFailure> lost = t.WorkerDied("w-a", "a", absl::Seconds(5));
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].job_id, "job-1");
  EXPECT_EQ(lost[0].kind, "WORKER_LOST");
  EXPECT_EQ(lost[0].reason, "worker w-a (node a) missed heartbeats for 5s; ranks [0, 1] lost");
  EXPECT_FALSE(t.HasRunningRanks("w-a"));
  EXPECT_EQ(t.WorkerDied("w-b", "b", absl::Seconds(5)).size(), 2u);
}

TEST(RankTracker, RestoredAttemptCountsEveryRankAsAckedAndRunning) {
  RankTracker t;
  t.RestoreAttempt(Attempt());
  for (int r = 0; r < 3; ++r) EXPECT_TRUE(t.IsAcked("job-1", r)) << r;
  EXPECT_TRUE(t.HasRunningRanks("w-a"));
  EXPECT_TRUE(t.HasRunningRanks("w-b"));
  EXPECT_TRUE(t.StartTimeouts(kStart + absl::Hours(1), absl::Seconds(30)).empty());
  EXPECT_EQ(t.LostRanks("w-b", {}).size(), 1u);
  t.EndAttempt("job-1");
  EXPECT_FALSE(t.HasRunningRanks("w-a"));
  EXPECT_FALSE(t.HasRunningRanks("w-b"));
  EXPECT_FALSE(t.IsAcked("job-1", 0));
  EXPECT_TRUE(t.LostRanks("w-b", {}).empty());
}

}  // namespace
}  // namespace shardline::coordinator

namespace shardline::coordinator {
namespace {

// fault_tolerance REPLICA_GROUPS: stopped ranks exit as expected; a replaced rank's older
// generation is ignored and the new one is tracked from its placement.
TEST(RankTracker, StoppedRanksAndOlderGenerationsAreExpectedAndReplacementsTracked) {
  RankTracker t;
  t.StartAttempt(Attempt());
  for (int r : {0, 1}) t.Observe("w-a", Rank(r, RankStatus::RUNNING));
  t.Observe("w-b", Rank(2, RankStatus::RUNNING));
  const RankTracker::Observation killed = t.Observe("w-a", Rank(0, RankStatus::EXITED, 1, -9));
  ASSERT_TRUE(killed.failed);
  EXPECT_EQ(killed.failed->ranks, (std::vector<int32_t>{0}));
  t.StopRanks("job-1", {0, 1});
  EXPECT_TRUE(t.IsStopped("job-1", 1));
  // Rank 1 is not lost when left out, and its exit, whatever the code, is no failure.
  EXPECT_TRUE(t.LostRanks("w-a", {}).empty());
  const RankTracker::Observation left = t.Observe("w-a", Rank(1, RankStatus::EXITED, 1, 7));
  EXPECT_FALSE(left.failed);
  EXPECT_FALSE(left.exited_ok);
  // Rank 0 runs again as generation 1 on w-b, placed 100 s after the attempt's start.
  t.ReplaceRank("job-1", 0, "w-b", "b", 1, kStart + absl::Seconds(100));
  EXPECT_FALSE(t.IsStopped("job-1", 0));
  EXPECT_FALSE(t.IsAcked("job-1", 0));
  EXPECT_TRUE(t.StartTimeouts(kStart + absl::Seconds(120), absl::Seconds(30)).empty());
  const std::vector<RankFailure> late =
      t.StartTimeouts(kStart + absl::Seconds(131), absl::Seconds(30));
  ASSERT_EQ(late.size(), 1u);
  EXPECT_EQ(late[0].ranks, (std::vector<int32_t>{0}));
  EXPECT_NE(late[0].reason.find("of their placement"), std::string::npos) << late[0].reason;
  RankStatus old = Rank(0, RankStatus::EXITED, 1, -9);
  EXPECT_FALSE(t.Observe("w-b", old).current);  // generation 0 on w-b: not the current process
  RankStatus fresh = Rank(0, RankStatus::RUNNING);
  fresh.set_generation(1);
  EXPECT_TRUE(t.Observe("w-b", fresh).current);
  fresh.set_state(RankStatus::EXITED);
  fresh.set_exit_code(0);
  EXPECT_TRUE(t.Observe("w-b", fresh).exited_ok);
}

}  // namespace
}  // namespace shardline::coordinator
