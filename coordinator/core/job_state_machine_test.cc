#include "coordinator/core/job_state_machine.h"

#include <functional>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace shardline::coordinator {
namespace {

const absl::Time kNow = absl::FromUnixSeconds(1700000000);
const std::vector<JobState> kAll = {
    JOB_STATE_UNSPECIFIED, PENDING, RUNNING, SUCCEEDED, FAILED, CANCELLED};

JobRecord NewJob(int max_restarts = 0) {
  JobRecord rec;
  rec.mutable_status()->set_job_id("job-1");
  rec.mutable_status()->mutable_spec()->set_world_size(4);
  rec.mutable_status()->mutable_spec()->mutable_restart()->set_max_restarts(max_restarts);
  rec.mutable_status()->mutable_spec()->mutable_restart()->set_backoff_s(3);
  EXPECT_TRUE(JobStateMachine(&rec, kNow).Submit().ok());
  return rec;
}

JobRecord InState(JobState s) {
  JobRecord rec = NewJob();
  JobStateMachine m(&rec, kNow);
  switch (s) {
    case RUNNING:
      EXPECT_TRUE(m.Start(4, "placed").ok());
      break;
    case SUCCEEDED:
      EXPECT_TRUE(m.Start(4, "placed").ok());
      EXPECT_TRUE(m.Succeed("done").ok());
      break;
    case FAILED:
      EXPECT_TRUE(m.Fail("broken").ok());
      break;
    case CANCELLED:
      EXPECT_TRUE(m.Cancel("user").ok());
      break;
    default:
      break;
  }
  EXPECT_EQ(rec.status().state(), s);
  return rec;
}

TEST(JobStateMachine, SubmitRecordsPendingAndEvent) {
  JobRecord rec = NewJob();
  EXPECT_EQ(rec.status().state(), PENDING);
  ASSERT_EQ(rec.status().events_size(), 1);
  EXPECT_EQ(rec.status().events(0).kind(), "SUBMITTED");
  EXPECT_EQ(rec.status().events(0).time_unix_ms(), absl::ToUnixMillis(kNow));
  auto again = JobStateMachine(&rec, kNow).Submit();
  EXPECT_EQ(again.code(), absl::StatusCode::kFailedPrecondition);
}

TEST(JobStateMachine, TransitionTableMatchesTheLifecycle) {
  for (JobState from : kAll) {
    for (JobState to : kAll) {
      const bool legal = (from == PENDING && (to == RUNNING || to == FAILED || to == CANCELLED)) ||
                         (from == RUNNING &&
                          (to == PENDING || to == SUCCEEDED || to == FAILED || to == CANCELLED));
      EXPECT_EQ(IsLegalTransition(from, to), legal)
          << JobState_Name(from) << " -> " << JobState_Name(to);
    }
  }
}

TEST(JobStateMachine, StartIncrementsAttemptAndRecordsReason) {
  JobRecord rec = NewJob();
  ASSERT_TRUE(JobStateMachine(&rec, kNow).Start(4, "4 ranks on 1 node").ok());
  EXPECT_EQ(rec.status().state(), RUNNING);
  EXPECT_EQ(rec.status().attempt(), 1);
  EXPECT_EQ(rec.status().world_size(), 4);
  EXPECT_EQ(rec.status().events().rbegin()->kind(), "SCHEDULED");
  EXPECT_EQ(rec.status().events().rbegin()->message(), "4 ranks on 1 node");
  EXPECT_EQ(rec.status().events().rbegin()->attempt(), 1);
}

TEST(JobStateMachine, SucceedFromRunningIsTerminal) {
  JobRecord rec = InState(SUCCEEDED);
  EXPECT_EQ(rec.status().finished_unix_ms(), absl::ToUnixMillis(kNow));
  EXPECT_EQ(rec.status().events().rbegin()->kind(), "SUCCEEDED");
}

TEST(JobStateMachine, FailedAttemptRestartsWhileRestartsRemain) {
  JobRecord rec = NewJob(/*max_restarts=*/2);
  for (int attempt = 1; attempt <= 3; ++attempt) {
    JobStateMachine m(&rec, kNow);
    ASSERT_TRUE(m.Start(4, "placed").ok());
    EXPECT_EQ(rec.status().attempt(), attempt);
    auto restarting = m.FailAttempt("RANK_FAILED", "rank 2 exited with code 1");
    ASSERT_TRUE(restarting.ok()) << restarting.status();
    if (attempt < 3) {
      EXPECT_TRUE(*restarting);
      EXPECT_EQ(rec.status().state(), PENDING);
      EXPECT_EQ(rec.status().events().rbegin()->kind(), "RESTARTING");
      EXPECT_EQ(rec.restart_not_before_unix_ms(), absl::ToUnixMillis(kNow + absl::Seconds(3)));
    } else {
      EXPECT_FALSE(*restarting);
      EXPECT_EQ(rec.status().state(), FAILED);
      EXPECT_NE(rec.status().events().rbegin()->message().find("restarts are used up (2 of 2)"),
                std::string::npos)
          << rec.status().events().rbegin()->message();
    }
  }
  // The failure itself is an event too, with its reason.
  int rank_failed = 0;
  for (const JobEvent& e : rec.status().events()) {
    if (e.kind() == "RANK_FAILED") {
      ++rank_failed;
      EXPECT_EQ(e.message(), "rank 2 exited with code 1");
    }
  }
  EXPECT_EQ(rank_failed, 3);
}

TEST(JobStateMachine, AttemptFailureNoRestartCanFixFailsTheJobWithRestartsLeft) {
  JobRecord rec = NewJob(/*max_restarts=*/3);
  JobStateMachine m(&rec, kNow);
  ASSERT_TRUE(m.Start(4, "placed").ok());
  auto restarting = m.FailAttempt("CHECKPOINT_DIR_NOT_SHARED", "checkpoint.dir /c is not shared",
                                  /*restartable=*/false);
  ASSERT_TRUE(restarting.ok()) << restarting.status();
  EXPECT_FALSE(*restarting);
  EXPECT_EQ(rec.status().state(), FAILED);
  EXPECT_EQ(rec.restarts(), 0);
  EXPECT_EQ(rec.status().message(), "checkpoint.dir /c is not shared");
  const JobEvent& last = *rec.status().events().rbegin();
  EXPECT_EQ(last.kind(), "FAILED");
  EXPECT_EQ(last.message(),
            "attempt 1 failed (CHECKPOINT_DIR_NOT_SHARED); not restarted, a new attempt would "
            "fail the same way: checkpoint.dir /c is not shared");
  const JobEvent& cause = *(rec.status().events().rbegin() + 1);
  EXPECT_EQ(cause.kind(), "CHECKPOINT_DIR_NOT_SHARED");
  EXPECT_EQ(cause.message(), "checkpoint.dir /c is not shared");
}

TEST(JobStateMachine, CancelFromPendingAndRunning) {
  for (JobState s : {PENDING, RUNNING}) {
    JobRecord rec = InState(s);
    ASSERT_TRUE(JobStateMachine(&rec, kNow).Cancel("user asked").ok());
    EXPECT_EQ(rec.status().state(), CANCELLED);
    EXPECT_EQ(rec.status().message(), "user asked");
  }
}

TEST(JobStateMachine, FailFromPendingAndRunning) {
  for (JobState s : {PENDING, RUNNING}) {
    JobRecord rec = InState(s);
    ASSERT_TRUE(JobStateMachine(&rec, kNow).Fail("never placeable").ok());
    EXPECT_EQ(rec.status().state(), FAILED);
  }
}

TEST(JobStateMachine, EveryIllegalTransitionIsFailedPreconditionAndChangesNothing) {
  struct Op {
    const char* name;
    JobState target;
    std::function<absl::Status(JobStateMachine&)> run;
  };
  const std::vector<Op> ops = {
      {"Start", RUNNING, [](JobStateMachine& m) { return m.Start(4, "x"); }},
      {"Succeed", SUCCEEDED, [](JobStateMachine& m) { return m.Succeed("x"); }},
      {"FailAttempt", PENDING,
       [](JobStateMachine& m) { return m.FailAttempt("RANK_FAILED", "x").status(); }},
      {"Fail", FAILED, [](JobStateMachine& m) { return m.Fail("x"); }},
      {"Cancel", CANCELLED, [](JobStateMachine& m) { return m.Cancel("x"); }},
  };
  int illegal = 0;
  for (JobState s : {PENDING, RUNNING, SUCCEEDED, FAILED, CANCELLED}) {
    for (const Op& op : ops) {
      JobRecord rec = InState(s);
      const bool legal = op.target == PENDING ? s == RUNNING : IsLegalTransition(s, op.target);
      if (legal) continue;
      ++illegal;
      const std::string before = rec.SerializeAsString();
      JobStateMachine m(&rec, kNow);
      absl::Status st = op.run(m);
      EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition)
          << op.name << " from " << JobState_Name(s);
      EXPECT_NE(st.message().find("illegal transition " + JobState_Name(s)), std::string::npos)
          << st;
      EXPECT_EQ(rec.SerializeAsString(), before) << op.name << " from " << JobState_Name(s);
    }
  }
  EXPECT_EQ(illegal, 2 + 1 + 3 * 5);  // PENDING: 2, RUNNING: 1, each terminal state: all 5
}

}  // namespace
}  // namespace shardline::coordinator
