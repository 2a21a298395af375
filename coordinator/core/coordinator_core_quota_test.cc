// CoordinatorCore's per-user quotas (user_quota.h) end to end in memory: submit refusals, a job
// over its owner's running-rank bound waiting (status message and QUOTA_WAIT event) and starting
// once the owner's other job ends, cancel reasons, and the usage WhoAmI shows.
#include <memory>
#include <string>

#include "common/testing/fake_clock.h"
#include "coordinator/core/coordinator_core.h"
#include "coordinator/testing/test_jobs.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shardline::coordinator {
namespace {

using ::testing::HasSubstr;

JobSpec Spec(const std::string& name, int w) {
  JobSpec spec;
  spec.set_name(name);
  spec.set_world_size(w);
  spec.mutable_fsdp()->set_sharding_strategy(FsdpSpec::FULL_SHARD);
  spec.mutable_train()->set_steps(100);
  return spec;
}

class QuotaTest : public ::testing::Test {
 protected:
  void Start(const UserQuotas& quotas) {
    CoreOptions o;
    o.clock = &clock_;
    o.quotas = quotas;
    auto core = CoordinatorCore::Create(o);
    ASSERT_TRUE(core.ok()) << core.status();
    core_ = std::move(*core);
  }
  std::string Submit(const std::string& name, int w, const std::string& owner) {
    auto id = core_->SubmitJob(Spec(name, w), owner);
    EXPECT_TRUE(id.ok()) << id.status();
    return id.ok() ? *id : "";
  }
  JobStatus Get(const std::string& id) { return *core_->GetJob(id); }

  FakeClock clock_;
  std::unique_ptr<CoordinatorCore> core_;
};

TEST_F(QuotaTest, SubmitPastThePendingBoundIsRefusedAndAddsNothing) {
  UserQuotas q;
  q.max_pending_jobs_per_user = 2;
  Start(q);
  Submit("a", 1, "bob");  // no workers: both stay PENDING
  Submit("b", 1, "bob");
  auto third = core_->SubmitJob(Spec("c", 1), "bob");
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(third.status().message(),
            "user bob has 2 pending jobs; at most 2 (--max_pending_jobs_per_user)");
  EXPECT_EQ(core_->ListJobs({}).size(), 2u);
  EXPECT_TRUE(core_->SubmitJob(Spec("alices", 1), "alice").ok());  // per user
  EXPECT_EQ(core_->UsageOf("bob").pending_jobs(), 2);
  EXPECT_EQ(core_->UsageOf("bob").max_pending_jobs(), 2);
}

TEST_F(QuotaTest, JobOverTheRunningRankBoundWaitsThenStartsWhenTheOwnersOtherJobEnds) {
  UserQuotas q;
  q.max_running_ranks_per_user = 2;
  Start(q);
  ASSERT_TRUE(core_->RegisterWorker(TestWorkerRequest("n0", 4)).ok());
  const std::string first = Submit("first", 1, "bob");
  ASSERT_EQ(Get(first).state(), RUNNING);
  const std::string second = Submit("second", 2, "bob");
  const JobStatus waiting = Get(second);
  EXPECT_EQ(waiting.state(), PENDING);
  EXPECT_EQ(waiting.message(),
            "waiting: user bob runs 1 ranks; this job's 2 would make it more than 2 "
            "(--max_running_ranks_per_user)");
  ASSERT_GT(waiting.events_size(), 0);
  EXPECT_EQ(waiting.events(waiting.events_size() - 1).kind(), "QUOTA_WAIT");
  // Another user's job starts on the free slots meanwhile.
  EXPECT_EQ(Get(Submit("alices", 2, "alice")).state(), RUNNING);
  EXPECT_EQ(core_->UsageOf("bob").running_ranks(), 1);
  ASSERT_TRUE(core_->CancelJob(first, "").ok());
  core_->Tick();
  EXPECT_EQ(Get(second).state(), RUNNING) << Get(second).message();
  // A world the bound could never hold is refused at submit.
  auto never = core_->SubmitJob(Spec("never", 3), "bob");
  EXPECT_EQ(never.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(never.status().message(), HasSubstr("could never start: user bob may run at most 2"));
}

// The users file's own bounds (SetUserQuotas) replace the flags' for that user: at submit, in
// scheduling and in WhoAmI's usage, each refusal naming the users file.
TEST_F(QuotaTest, AUsersOwnBoundsFromTheUsersFileReplaceTheFlags) {
  UserQuotas q;
  q.max_running_ranks_per_user = 4;
  q.max_pending_jobs_per_user = 10;
  Start(q);
  UserQuotaOverrides own;
  own["bob"].max_running_ranks = 1;
  own["bob"].max_pending_jobs = 1;
  core_->SetUserQuotas(own);
  ASSERT_TRUE(core_->RegisterWorker(TestWorkerRequest("n0", 4)).ok());
  auto wide = core_->SubmitJob(Spec("wide", 2), "bob");
  EXPECT_EQ(wide.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(wide.status().message(),
            "job of world_size 2 could never start: user bob may run at most 1 ranks at once "
            "(max_running_ranks of user bob in the users file)");
  EXPECT_EQ(Get(Submit("alices", 2, "alice")).state(), RUNNING);  // alice keeps the flag's 4
  EXPECT_EQ(Get(Submit("b1", 1, "bob")).state(), RUNNING);
  const std::string waits = Submit("b2", 1, "bob");
  EXPECT_EQ(Get(waits).message(),
            "waiting: user bob runs 1 ranks; this job's 1 would make it more than 1 "
            "(max_running_ranks of user bob in the users file)");
  auto third = core_->SubmitJob(Spec("b3", 1), "bob");
  EXPECT_EQ(third.status().message(),
            "user bob has 1 pending jobs; at most 1 (max_pending_jobs of user bob in the users "
            "file)");
  const UserUsage bob = core_->UsageOf("bob");
  EXPECT_EQ(bob.max_running_ranks(), 1);
  EXPECT_EQ(bob.max_pending_jobs(), 1);
  EXPECT_EQ(core_->UsageOf("alice").max_running_ranks(), 4);
  // A reloaded file without bob's line gives him the flags' bounds again.
  core_->SetUserQuotas({});
  core_->Tick();
  EXPECT_EQ(Get(waits).state(), RUNNING) << Get(waits).message();
  EXPECT_EQ(core_->UsageOf("bob").max_running_ranks(), 4);
}

TEST_F(QuotaTest, CancelReasonOverTheBoundIsRefusedAndTheJobKeepsGoing) {
  UserQuotas q;
  q.max_reason_bytes = 16;
  Start(q);
  const std::string job = Submit("j", 1, "bob");
  const absl::Status s = core_->CancelJob(job, std::string(17, 'r'));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(), "cancel reason of 17 bytes; at most 16 (--max_reason_bytes)");
  EXPECT_EQ(Get(job).state(), PENDING);
  EXPECT_TRUE(core_->CancelJob(job, "short").ok());
}

TEST_F(QuotaTest, SpecBytesOfPendingAndRunningJobsCountAgainstTheUser) {
  UserQuotas q;
  const int64_t one = static_cast<int64_t>(Spec("j", 1).ByteSizeLong());
  q.max_spec_bytes_per_user = 2 * one;
  Start(q);
  Submit("j", 1, "bob");
  Submit("j", 1, "bob");
  EXPECT_EQ(core_->UsageOf("bob").spec_bytes(), 2 * one);
  auto third = core_->SubmitJob(Spec("j", 1), "bob");
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(third.status().message(), HasSubstr("(--max_spec_bytes_per_user)"));
}

}  // namespace
}  // namespace shardline::coordinator
