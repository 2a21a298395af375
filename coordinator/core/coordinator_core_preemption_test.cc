// CoordinatorCore's preemption through a checkpoint (coordinator_core_preemption.cc) in memory:
// a waiting job of higher priority asks a running one to save and stop (PREEMPTING, PREEMPT to
// its worker), the committed preemption checkpoint requeues it (PREEMPTED, no restart counted),
// the waiting job starts in its slots and the preempted one resumes from that step afterwards;
// jobs that may not be preempted; the timeout; a PREEMPT sent again on a new stream.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/testing/fake_clock.h"
#include "coordinator/core/coordinator_core.h"
#include "coordinator/testing/test_jobs.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shardline::coordinator {
namespace {

using ::testing::HasSubstr;

JobSpec Spec(const std::string& name, int w, int priority) {
  JobSpec spec = TestJobSpec(name, w);
  spec.set_priority(priority);
  spec.mutable_scheduling()->set_preemptible(true);
  spec.mutable_train()->set_steps(100);
  return spec;
}

class PreemptionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CoreOptions o;
    o.clock = &clock_;
    o.heartbeat_interval = absl::Seconds(1);
    o.heartbeat_timeout = absl::Seconds(5);
    o.preempt_timeout = absl::Seconds(30);
    auto core = CoordinatorCore::Create(o);
    ASSERT_TRUE(core.ok()) << core.status();
    core_ = std::move(*core);
    auto w = core_->RegisterWorker(TestWorkerRequest("a", 4));
    ASSERT_TRUE(w.ok()) << w.status();
    worker_ = w->worker_id();
    gen_ = *core_->OpenAssignmentStream(worker_);
  }
  std::string Submit(const JobSpec& spec) {
    auto id = core_->SubmitJob(spec);
    EXPECT_TRUE(id.ok()) << id.status();
    return id.ok() ? *id : "";
  }
  std::vector<Assignment> Drain() {
    std::vector<Assignment> out;
    Assignment a;
    while (true) {
      auto got = core_->NextAssignment(worker_, gen_, absl::ZeroDuration(), &a);
      EXPECT_TRUE(got.ok()) << got.status();
      if (!got.ok() || !*got) break;
      out.push_back(a);
    }
    return out;
  }
  // Rank 0's committing report of `step` (and the other ranks' files) of a `w`-rank attempt.
  void Commit(const std::string& job, int attempt, int64_t step, int w, bool preempted) {
    for (int f = 0; f < w; ++f) {
      CheckpointReport r;
      r.set_job_id(job);
      r.set_attempt(attempt);
      r.set_rank(f);
      r.set_step(step);
      r.set_path(absl::StrCat("/ckpt/", job, "/step_", step));
      r.add_files(absl::StrCat("shard_", f, ".bin"));
      r.set_expected_files(w);
      if (f == 0) {
        r.add_files("MANIFEST.json");
        r.set_manifest_committed(true);
        r.set_preempted(preempted);
      }
      ASSERT_TRUE(core_->ReportCheckpoint(r).ok());
    }
  }
  void Exit(const std::string& job, int attempt, int w, int code) {
    HeartbeatRequest hb;
    hb.set_worker_id(worker_);
    for (int r = 0; r < w; ++r) {
      RankStatus* rs = hb.add_ranks();
      rs->set_job_id(job);
      rs->set_attempt(attempt);
      rs->set_rank(r);
      rs->set_state(RankStatus::EXITED);
      rs->set_exit_code(code);
    }
    ASSERT_TRUE(core_->Heartbeat(hb).ok());
  }
  JobStatus Get(const std::string& id) { return *core_->GetJob(id); }
  static int Count(const JobStatus& st, const std::string& kind) {
    int n = 0;
    for (const JobEvent& e : st.events()) n += e.kind() == kind;
    return n;
  }
  static std::string Last(const JobStatus& st, const std::string& kind) {
    std::string m;
    for (const JobEvent& e : st.events()) {
      if (e.kind() == kind) m = e.message();
    }
    return m;
  }
  static int Actions(const std::vector<Assignment>& as, Assignment::Action action,
                     const std::string& job) {
    int n = 0;
    for (const Assignment& a : as) n += a.action() == action && a.job_id() == job;
    return n;
  }

  FakeClock clock_;
  std::unique_ptr<CoordinatorCore> core_;
  std::string worker_;
  int64_t gen_ = 0;
};

TEST_F(PreemptionTest, AHigherPriorityJobTakesTheSlotsThroughTheLowOnesCheckpoint) {
  const std::string low = Submit(Spec("low", 4, 0));
  ASSERT_EQ(Get(low).state(), RUNNING);
  Drain();
  const std::string high = Submit(Spec("high", 4, 5));
  EXPECT_EQ(Get(high).state(), PENDING);
  EXPECT_EQ(Get(high).message(), "preempting lower-priority job(s) " + low +
                                     ": waiting for them to save a checkpoint and stop");
  EXPECT_EQ(Last(Get(low), "PREEMPTING"),
            "job " + high +
                " (priority 5) needs the slots of this job (priority 0): saving a "
                "checkpoint at the next step, then requeued to resume from it");
  std::vector<Assignment> sent = Drain();
  ASSERT_EQ(Actions(sent, Assignment::PREEMPT, low), 1);
  EXPECT_EQ(sent[0].attempt(), 1);
  // Later rounds wait for it; nothing is asked twice.
  core_->Tick();
  EXPECT_EQ(Get(high).message(),
            "waiting for preempted job(s) " + low + " to save a checkpoint and stop");
  EXPECT_EQ(Actions(Drain(), Assignment::PREEMPT, low), 0);
  EXPECT_EQ(Count(Get(low), "PREEMPTING"), 1);

  // A periodic checkpoint committed meanwhile is not the preemption's.
  Commit(low, 1, 10, 4, /*preempted=*/false);
  EXPECT_EQ(Get(low).state(), RUNNING);
  Commit(low, 1, 12, 4, /*preempted=*/true);
  JobStatus st = Get(low);
  EXPECT_EQ(st.state(), PENDING);
  EXPECT_EQ(Last(st, "PREEMPTED"), "preempted by job " + high +
                                       ": checkpoint step 12 committed; requeued, resumes from "
                                       "it when slots free");
  EXPECT_EQ(Actions(Drain(), Assignment::STOP, low), 1);
  EXPECT_EQ(Get(high).state(), PENDING);  // the stopped ranks still hold the slots
  Exit(low, 1, 4, 143);
  core_->Tick();
  ASSERT_EQ(Get(high).state(), RUNNING);
  EXPECT_EQ(Get(low).state(), PENDING);
  EXPECT_EQ(core_->counters().preemptions, 1);

  // The high job ends: the low one resumes from the preemption's checkpoint, no restart used.
  Drain();
  Exit(high, 1, 4, 0);
  core_->Tick();
  st = Get(low);
  ASSERT_EQ(st.state(), RUNNING);
  EXPECT_EQ(st.attempt(), 2);
  EXPECT_THAT(Last(st, "SCHEDULED"), HasSubstr("resuming from checkpoint step 12"));
  EXPECT_EQ(Count(st, "RESTARTING"), 0);
  for (const Assignment& a : Drain()) {
    if (a.action() == Assignment::START && a.job_id() == low) {
      EXPECT_EQ(a.resume_step(), 12);
    }
  }
}

TEST_F(PreemptionTest, JobsThatMayNotBePreemptedAreNot) {
  JobSpec opted_out = Spec("opted-out", 2, 0);
  opted_out.mutable_scheduling()->set_preemptible(false);
  JobSpec no_checkpoints = Spec("no-checkpoints", 1, 0);
  no_checkpoints.mutable_checkpoint()->set_dir("");
  JobSpec same = Spec("same", 1, 5);
  const std::string a = Submit(opted_out), b = Submit(no_checkpoints), c = Submit(same);
  ASSERT_EQ(Get(a).state(), RUNNING);
  ASSERT_EQ(Get(b).state(), RUNNING);
  ASSERT_EQ(Get(c).state(), RUNNING);
  Drain();
  const std::string high = Submit(Spec("high", 2, 5));
  EXPECT_EQ(Get(high).state(), PENDING);
  EXPECT_EQ(Get(high).message(), "waiting for 2 CPU slots (0 free on 0 live workers)");
  for (const std::string& id : {a, b, c}) EXPECT_EQ(Count(Get(id), "PREEMPTING"), 0);
  EXPECT_EQ(Drain().size(), 0u);
}

TEST_F(PreemptionTest, APreemptedJobThatCommitsNothingIsStoppedAtTheTimeout) {
  const std::string low = Submit(Spec("low", 4, 0));
  Commit(low, 1, 10, 4, false);
  const std::string high = Submit(Spec("high", 2, 1));
  ASSERT_EQ(Count(Get(low), "PREEMPTING"), 1);
  for (int i = 0; i < 29; ++i) {
    clock_.Advance(absl::Seconds(1));
    ASSERT_TRUE(core_
                    ->Heartbeat([&] {
                      HeartbeatRequest hb;
                      hb.set_worker_id(worker_);
                      return hb;
                    }())
                    .ok());
    core_->Tick();
  }
  EXPECT_EQ(Get(low).state(), RUNNING);
  clock_.Advance(absl::Seconds(1));
  core_->Tick();
  const JobStatus st = Get(low);
  EXPECT_EQ(st.state(), PENDING);
  EXPECT_EQ(Last(st, "PREEMPTED"),
            "preempted by job " + high +
                ": no checkpoint committed within 30s "
                "(--preempt_timeout_s); stopped and requeued, resumes from checkpoint step 10 (the "
                "steps after it are trained again)");
}

TEST_F(PreemptionTest, APreemptIsSentAgainOnANewStream) {
  const std::string low = Submit(Spec("low", 4, 0));
  Submit(Spec("high", 4, 5));
  gen_ = *core_->OpenAssignmentStream(worker_);  // the old stream (and its PREEMPT) is gone
  EXPECT_EQ(Actions(Drain(), Assignment::PREEMPT, low), 1);
}

}  // namespace
}  // namespace shardline::coordinator
