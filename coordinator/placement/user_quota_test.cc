// The per-user quota checks: each refusal's code and message (user, numbers, flag), what counts
// as usage, and that a bound of 0 means none.
#include "coordinator/placement/user_quota.h"

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shardline::coordinator {
namespace {

using ::testing::HasSubstr;

JobSpec SpecOf(int world_size, int name_bytes = 4) {
  JobSpec spec;
  spec.set_name(std::string(name_bytes, 'n'));
  spec.set_world_size(world_size);
  return spec;
}

JobRecord Job(const std::string& owner, JobState state, int placed = 0) {
  JobRecord rec;
  rec.mutable_status()->set_owner(owner);
  rec.mutable_status()->set_state(state);
  *rec.mutable_status()->mutable_spec() = SpecOf(placed > 0 ? placed : 1);
  for (int r = 0; r < placed; ++r) rec.mutable_status()->add_placement()->set_rank(r);
  return rec;
}

TEST(UserQuota, SubmitPastThePendingBoundIsRefusedNamingUserNumbersAndFlag) {
  UserQuotas q;
  q.max_pending_jobs_per_user = 8;
  UserUsageCount usage;
  usage.pending_jobs = 8;
  const absl::Status s = CheckSubmitQuota(q, "bob", usage, SpecOf(1));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(), "user bob has 8 pending jobs; at most 8 (--max_pending_jobs_per_user)");
  usage.pending_jobs = 7;
  EXPECT_TRUE(CheckSubmitQuota(q, "bob", usage, SpecOf(1)).ok());
  q.max_pending_jobs_per_user = 0;  // no bound
  usage.pending_jobs = 100000;
  EXPECT_TRUE(CheckSubmitQuota(q, "bob", usage, SpecOf(1)).ok());
}

TEST(UserQuota, SpecBytesPerJobAndPerUserAreBounded) {
  UserQuotas q;
  q.max_spec_bytes_per_job = 100;
  q.max_spec_bytes_per_user = 1000;
  const JobSpec big = SpecOf(1, 200);
  absl::Status s = CheckSubmitQuota(q, "bob", {}, big);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(), absl::StrCat("job spec of ", big.ByteSizeLong(),
                                      " bytes; at most 100 (--max_spec_bytes_per_job)"));
  UserUsageCount usage;
  usage.spec_bytes = 950;
  const JobSpec small = SpecOf(1, 60);
  s = CheckSubmitQuota(q, "bob", usage, small);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("user bob holds 950 bytes of specs in pending and running "
                                     "jobs"));
  EXPECT_THAT(s.message(), HasSubstr("(--max_spec_bytes_per_user)"));
  usage.spec_bytes = 0;
  EXPECT_TRUE(CheckSubmitQuota(q, "bob", usage, small).ok());
}

TEST(UserQuota, AWorldLargerThanTheRunningRankBoundIsRefusedAtSubmit) {
  UserQuotas q;
  q.max_running_ranks_per_user = 2;
  const absl::Status s = CheckSubmitQuota(q, "bob", {}, SpecOf(3));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(),
            "job of world_size 3 could never start: user bob may run at most 2 ranks at once "
            "(--max_running_ranks_per_user)");
  // One that fits the bound is not refused, however many ranks the user runs now: it waits.
  UserUsageCount usage;
  usage.running_ranks = 2;
  EXPECT_TRUE(CheckSubmitQuota(q, "bob", usage, SpecOf(2)).ok());
}

TEST(UserQuota, ReasonOverTheBoundIsRefused) {
  UserQuotas q;
  q.max_reason_bytes = 10;
  const absl::Status s = CheckReasonBytes(q, "cancel reason", std::string(11, 'x'));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(), "cancel reason of 11 bytes; at most 10 (--max_reason_bytes)");
  EXPECT_TRUE(CheckReasonBytes(q, "cancel reason", std::string(10, 'x')).ok());
}

TEST(UserQuota, UsageCountsTheUsersPendingAndRunningJobsOnly) {
  UserUsageCount usage;
  CountUsage(Job("bob", PENDING), "bob", &usage);
  CountUsage(Job("bob", RUNNING, 3), "bob", &usage);
  CountUsage(Job("bob", SUCCEEDED, 4), "bob", &usage);
  CountUsage(Job("alice", PENDING), "bob", &usage);
  CountUsage(Job("alice", RUNNING, 5), "bob", &usage);
  EXPECT_EQ(usage.pending_jobs, 1);
  EXPECT_EQ(usage.running_ranks, 3);
  EXPECT_EQ(usage.spec_bytes,
            static_cast<int64_t>(Job("bob", PENDING).status().spec().ByteSizeLong() +
                                 Job("bob", RUNNING, 3).status().spec().ByteSizeLong()));
  UserQuotas q;
  q.max_running_ranks_per_user = 4;
  const UserUsage report = UsageReport(q, usage);
  EXPECT_EQ(report.pending_jobs(), 1);
  EXPECT_EQ(report.max_pending_jobs(), 1000);
  EXPECT_EQ(report.running_ranks(), 3);
  EXPECT_EQ(report.max_running_ranks(), 4);
}

}  // namespace
}  // namespace shardline::coordinator
