// DashboardApi over a real CoordinatorCore in memory: what each document holds, the owner rule
// (as the API's), errors with their codes and messages, and escaping of user-controlled text.
#include "coordinator/dashboard/json_api.h"

#include "absl/strings/str_cat.h"
#include "coordinator/dashboard/testing/core_with_jobs.h"
#include "coordinator/observability/training_series.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shardline::coordinator::dashboard {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const User kAlice{"alice", false};
const User kBob{"bob", false};
const User kOps{"ops", true};

TEST(DashboardApi, JobsListsEveryJobNewestFirstWithoutSpecEventsOrPlacement) {
  CoreWithJobs c;
  const std::string first = c.RunningJob("first", "alice");
  const std::string second = c.RunningJob("second", "bob");
  DashboardApi api(c.core());
  const std::string json = *api.Jobs(kAlice);  // every user sees every job, as ListJobs
  const size_t at_second = json.find(absl::StrCat("\"job_id\":\"", second, "\""));
  const size_t at_first = json.find(absl::StrCat("\"job_id\":\"", first, "\""));
  ASSERT_NE(at_second, std::string::npos) << json;
  ASSERT_NE(at_first, std::string::npos) << json;
  EXPECT_LT(at_second, at_first);
  EXPECT_THAT(json, HasSubstr("\"spec\":{\"name\":\"second\""));
  EXPECT_THAT(json, HasSubstr("\"owner\":\"bob\""));
  EXPECT_THAT(json, HasSubstr("\"state\":\"RUNNING\""));
  EXPECT_THAT(json, Not(HasSubstr("\"events\":[{")));
  EXPECT_THAT(json, Not(HasSubstr("\"placement\":[{")));
  EXPECT_THAT(json, Not(HasSubstr("world_size\":2,\"model")));
  // The size stays (it used to read world_size 0).
  EXPECT_THAT(json, HasSubstr("\"spec\":{\"name\":\"second\",\"world_size\":2"));
}

TEST(DashboardApi, JobsComeInBoundedPagesNewestFirst) {
  CoreWithJobs c;
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) ids.push_back(c.RunningJob(absl::StrCat("j", i), "alice"));
  DashboardApi api(c.core());
  auto first = api.Jobs(kAlice, /*page_size=*/2);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_THAT(*first, HasSubstr(absl::StrCat("\"job_id\":\"", ids[2], "\"")));
  EXPECT_THAT(*first, HasSubstr(absl::StrCat("\"job_id\":\"", ids[1], "\"")));
  EXPECT_THAT(*first, Not(HasSubstr(absl::StrCat("\"job_id\":\"", ids[0], "\""))));
  const std::string marker = "\"next_page_token\":\"";
  const size_t at = first->find(marker);
  ASSERT_NE(at, std::string::npos) << *first;
  const std::string token =
      first->substr(at + marker.size(), first->find('"', at + marker.size()) - at - marker.size());
  auto second = api.Jobs(kAlice, 2, token);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_THAT(*second, HasSubstr(absl::StrCat("\"job_id\":\"", ids[0], "\"")));
  EXPECT_THAT(*second, HasSubstr("\"next_page_token\":\"\""));
  // Past the maximum page size (--max_list_page_size, 1000 here), and a made-up token.
  EXPECT_EQ(api.Jobs(kAlice, 1001).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(api.Jobs(kAlice, 1001).status().message(), HasSubstr("(--max_list_page_size)"));
  EXPECT_EQ(api.Jobs(kAlice, 2, "zzz").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(DashboardApi, JobHoldsPlacementEventsAndWhetherTheUserMayReadTheRest) {
  CoreWithJobs c;
  const std::string job = c.RunningJob("hybrid", "alice", 4);
  DashboardApi api(c.core());
  auto as_alice = api.Job(kAlice, job);
  ASSERT_TRUE(as_alice.ok()) << as_alice.status();
  EXPECT_THAT(*as_alice, HasSubstr("\"may_read\":true}"));
  EXPECT_THAT(*as_alice, HasSubstr("\"shard_group\":1,\"replicate_group\":1"));
  EXPECT_THAT(*as_alice, HasSubstr("\"kind\":\"SUBMITTED\""));
  EXPECT_THAT(*api.Job(kBob, job), HasSubstr("\"may_read\":false}"));
  EXPECT_THAT(*api.Job(kOps, job), HasSubstr("\"may_read\":true}"));
  auto none = api.Job(kAlice, "job-nope");
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
}

TEST(DashboardApi, MetricsAreTheStoredSeriesForTheOwnerOrAnAdminOnly) {
  CoreWithJobs c;
  const std::string job = c.RunningJob("curve", "alice");
  for (int step = 1; step <= 5; ++step) c.Report(job, step, 4.0 - 0.5 * step);
  DashboardApi api(c.core());
  auto m = api.Metrics(kAlice, job);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_THAT(*m, HasSubstr("\"reported_steps\":\"5\""));
  EXPECT_THAT(*m, HasSubstr("\"step\":\"5\""));
  EXPECT_THAT(*m, HasSubstr("\"loss\":1.5"));
  EXPECT_THAT(*m, HasSubstr("\"val_loss\":\"NaN\""));  // JSON has no NaN: proto JSON's string
  EXPECT_TRUE(api.Metrics(kOps, job).ok());
  auto bob = api.Metrics(kBob, job);
  EXPECT_EQ(bob.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(bob.status().message(),
            absl::StrCat("job ", job,
                         " is owned by alice; only its owner or an admin may read "
                         "its metrics"));
  EXPECT_EQ(api.Checkpoints(kBob, job).status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(api.Checkpoint(kBob, job, 1).status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(api.Logs(kBob, job, 0, 10).status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(api.Metrics(kOps, "job-nope").status().code(), absl::StatusCode::kNotFound);
}

// training_series_test feeds the series itself a million steps; through the core 200,000 (about
// 100 times the capacity) keep this test around a second.
TEST(DashboardApi, ALongJobsPageReadsAtMostTheStoredPoints) {
  CoreWithJobs c;
  const std::string job = c.RunningJob("long", "alice");
  constexpr int kSteps = 200000;
  for (int step = 1; step <= kSteps; ++step) c.Report(job, step, 2.0);
  DashboardApi api(c.core());
  auto m = api.Metrics(kAlice, job);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_THAT(*m, HasSubstr(absl::StrCat("\"reported_steps\":\"", kSteps, "\"")));
  int points = 0;
  for (size_t at = m->find("\"first_step\""); at != std::string::npos;
       at = m->find("\"first_step\"", at + 1)) {
    ++points;
  }
  // The points plus `latest`: the series' capacity (training_series.h), not the history.
  EXPECT_GT(points, TrainingSeries::kDefaultCapacity / 2);
  EXPECT_LE(points, TrainingSeries::kDefaultCapacity + 1);
  EXPECT_LT(m->size(), 1u << 20) << "one page load reads under 1 MiB";
}

TEST(DashboardApi, LogsAreEveryRanksTailAfterASequenceNumber) {
  CoreWithJobs c;
  const std::string job = c.RunningJob("logged", "alice");
  c.Log(job, 0, {"zero a", "zero b", "zero c"});
  c.Log(job, 1, {"one a"});
  DashboardApi api(c.core());
  auto tail = api.Logs(kAlice, job, 0, 2);
  ASSERT_TRUE(tail.ok()) << tail.status();
  EXPECT_THAT(*tail, Not(HasSubstr("zero a")));
  EXPECT_THAT(*tail, HasSubstr("\"text\":\"zero c\""));
  EXPECT_THAT(*tail, HasSubstr("\"text\":\"one a\""));
  EXPECT_THAT(*tail, HasSubstr("\"next_seq\":\"4\""));
  c.Log(job, 1, {"one b"});
  auto newer = api.Logs(kAlice, job, 4, 200);
  ASSERT_TRUE(newer.ok()) << newer.status();
  EXPECT_THAT(*newer, HasSubstr("\"text\":\"one b\""));
  EXPECT_THAT(*newer, Not(HasSubstr("one a")));
  for (int bad : {0, DashboardApi::kMaxTailLines + 1}) {
    auto r = api.Logs(kAlice, job, 0, bad);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(r.status().message(), absl::StrCat("tail must be between 1 and 1000, got ", bad));
  }
}

TEST(DashboardApi, UserControlledTextIsJsonEscaped) {
  CoreWithJobs c;
  // Job names are validated ([a-zA-Z0-9._-]); log lines are whatever a trainer prints.
  const std::string job = c.RunningJob("logged", "alice");
  c.Log(job, 0, {"</script><img src=x onerror=\"alert(1)\">\\"});
  DashboardApi api(c.core());
  auto json = api.Logs(kAlice, job, 0, 10);
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_THAT(*json, Not(HasSubstr("onerror=\"alert")));  // the quote is escaped
  EXPECT_THAT(*json, HasSubstr("onerror=\\\"alert(1)\\\""));
  // No markup survives: < and > are escaped too, and so is the backslash.
  EXPECT_THAT(*json, HasSubstr("\\u003c/script\\u003e\\u003cimg src=x"));
  EXPECT_THAT(*json, HasSubstr("\\u003e\\\\\""));
}

TEST(DashboardApi, WorkersAndWhoAmI) {
  CoreWithJobs c;
  c.RunningJob("any", "alice");
  DashboardApi api(c.core());
  EXPECT_THAT(api.Workers(kBob), HasSubstr("\"node_name\":\"node-1\""));
  EXPECT_THAT(api.Workers(kBob), HasSubstr("\"busy_slots\":2"));
  EXPECT_EQ(api.WhoAmI(kOps), "{\"user\":\"ops\",\"admin\":true}");
  EXPECT_EQ(DashboardApi::ErrorJson(absl::NotFoundError("no \"job\"")),
            "{\"error\":\"no \\\"job\\\"\"}");
}

}  // namespace
}  // namespace shardline::coordinator::dashboard
