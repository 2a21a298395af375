#include "coordinator/job_table.h"

#include <cstdlib>

#include "gtest/gtest.h"

namespace shardline::coordinator {
namespace {

const absl::Time kNow = absl::FromUnixSeconds(1700000000);

JobSpec Spec(const std::string& name) {
  JobSpec spec;
  spec.set_name(name);
  spec.set_world_size(2);
  spec.mutable_train()->set_steps(50);
  return spec;
}

TEST(JobTable, SubmitGivesIdsInSubmissionOrderAndReportsTheChange) {
  ChangeFeed feed;
  JobTable jobs(/*store=*/nullptr, &feed);
  auto a = jobs.Submit(Spec("a"), kNow);
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = jobs.Submit(Spec("b"), kNow);
  ASSERT_TRUE(b.ok()) << b.status();
  const JobStatus& st = (*a)->status();
  EXPECT_EQ(st.job_id(), "job-1");
  EXPECT_EQ(st.state(), PENDING);
  EXPECT_EQ(st.world_size(), 2);
  EXPECT_EQ(st.total_steps(), 50);
  EXPECT_EQ(st.spec().name(), "a");
  ASSERT_EQ(st.events_size(), 1);
  EXPECT_EQ(st.events(0).kind(), "SUBMITTED");
  EXPECT_EQ((*b)->status().job_id(), "job-2");
  EXPECT_EQ((*b)->seq(), 2);
  EXPECT_EQ(feed.Version("job-1"), 1);
  EXPECT_EQ(feed.Version("job-2"), 2);
  jobs.Changed(**a);
  EXPECT_EQ(feed.Version("job-1"), 3);
}

TEST(JobTable, FindListAndCount) {
  ChangeFeed feed;
  JobTable jobs(nullptr, &feed);
  for (int i = 0; i < 11; ++i) ASSERT_TRUE(jobs.Submit(Spec("j"), kNow).ok());
  (*jobs.Find("job-2"))->mutable_status()->set_state(RUNNING);
  auto missing = jobs.Find("job-99");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(), "unknown job job-99");
  // Submission order, not id order ("job-10" sorts before "job-2" as a string).
  const std::vector<JobStatus> all = jobs.List({});
  ASSERT_EQ(all.size(), 11u);
  for (int i = 0; i < 11; ++i) EXPECT_EQ(all[i].job_id(), "job-" + std::to_string(i + 1));
  const std::vector<JobStatus> running = jobs.List({RUNNING});
  ASSERT_EQ(running.size(), 1u);
  EXPECT_EQ(running[0].job_id(), "job-2");
  const std::map<JobState, int> counts = jobs.CountByState();
  EXPECT_EQ(counts.at(PENDING), 10);
  EXPECT_EQ(counts.at(RUNNING), 1);
}

TEST(JobTable, JobsAreStoredAndRestoredWithTheirSequence) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/job_table";
  {
    auto store = StateStore::Open(dir);
    ASSERT_TRUE(store.ok()) << store.status();
    ChangeFeed feed;
    JobTable jobs(store->get(), &feed);
    auto a = jobs.Submit(Spec("a"), kNow);
    ASSERT_TRUE(a.ok());
    (*a)->mutable_status()->set_message("changed");
    jobs.Changed(**a);
    ASSERT_TRUE(jobs.Submit(Spec("b"), kNow).ok());
  }
  auto store = StateStore::Open(dir);
  ASSERT_TRUE(store.ok()) << store.status();
  auto loaded = (*store)->LoadJobs();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ(loaded->size(), 2u);
  ChangeFeed feed;
  JobTable jobs(store->get(), &feed);
  for (const JobRecord& rec : *loaded) jobs.Restore(rec);
  EXPECT_EQ((*jobs.Find("job-1"))->status().message(), "changed");
  EXPECT_EQ(feed.Version("job-1"), 1);  // known, not reported as changed
  absl::Mutex mu;
  absl::MutexLock lock(&mu);
  ChangeFeed::Dirty dirty;
  feed.WaitDirtyLocked(&mu, absl::ZeroDuration(), &dirty);
  EXPECT_TRUE(dirty.jobs.empty());
  auto c = jobs.Submit(Spec("c"), kNow);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ((*c)->status().job_id(), "job-3");  // numbering goes on after the restored ones
}

}  // namespace
}  // namespace shardline::coordinator
