#include "coordinator/core/change_feed.h"

#include <thread>

#include "gtest/gtest.h"

namespace shardline::coordinator {
namespace {

TEST(ChangeFeed, VersionsStartAboveZeroAndGrowAcrossJobs) {
  ChangeFeed feed;
  EXPECT_EQ(feed.Version("job-1"), 0);  // unknown
  feed.AddJob("job-1");
  EXPECT_EQ(feed.Version("job-1"), 1);
  feed.JobChanged("job-2");
  EXPECT_EQ(feed.Version("job-2"), 2);
  feed.JobChanged("job-1");
  EXPECT_EQ(feed.Version("job-1"), 3);
}

TEST(ChangeFeed, WaitForJobReturnsTheNewerVersionOrTheCurrentOneAtTheDeadline) {
  ChangeFeed feed;
  absl::Mutex mu;
  absl::MutexLock lock(&mu);
  feed.JobChanged("job-1");
  int64_t version = -1;
  EXPECT_TRUE(feed.WaitForJobLocked(&mu, "job-1", 0, absl::InfiniteFuture(), &version).ok());
  EXPECT_EQ(version, 1);
  const absl::Time t0 = absl::Now();
  EXPECT_TRUE(feed.WaitForJobLocked(&mu, "job-1", 1, t0 + absl::Milliseconds(50), &version).ok());
  EXPECT_EQ(version, 1);
  EXPECT_GE(absl::Now() - t0, absl::Milliseconds(40));
  const absl::Status s = feed.WaitForJobLocked(&mu, "job-9", 0, absl::Now(), &version);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "unknown job job-9");
}

TEST(ChangeFeed, WaitForJobWakesOnAChangeFromAnotherThread) {
  ChangeFeed feed;
  absl::Mutex mu;
  {
    absl::MutexLock lock(&mu);
    feed.JobChanged("job-1");
  }
  std::thread writer([&] {
    absl::SleepFor(absl::Milliseconds(50));
    absl::MutexLock lock(&mu);
    feed.JobChanged("job-1");
  });
  int64_t version = 0;
  {
    absl::MutexLock lock(&mu);
    EXPECT_TRUE(
        feed.WaitForJobLocked(&mu, "job-1", 1, absl::Now() + absl::Seconds(30), &version).ok());
  }
  writer.join();
  EXPECT_EQ(version, 2);
}

TEST(ChangeFeed, ShutdownEndsWaitsWithUnavailableUnlessTheJobIsNewer) {
  ChangeFeed feed;
  absl::Mutex mu;
  absl::MutexLock lock(&mu);
  feed.JobChanged("job-1");
  feed.Shutdown();
  EXPECT_TRUE(feed.shut_down());
  int64_t version = 0;
  const absl::Status s = feed.WaitForJobLocked(&mu, "job-1", 1, absl::InfiniteFuture(), &version);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), "coordinator is shutting down");
  EXPECT_EQ(version, 1);
  EXPECT_TRUE(feed.WaitForJobLocked(&mu, "job-1", 0, absl::InfiniteFuture(), &version).ok());
  ChangeFeed::Dirty dirty;
  EXPECT_FALSE(feed.WaitDirtyLocked(&mu, absl::Seconds(30), &dirty));
}

TEST(ChangeFeed, WaitDirtyReportsEachChangeOnce) {
  ChangeFeed feed;
  absl::Mutex mu;
  absl::MutexLock lock(&mu);
  feed.AddJob("job-0");  // a reloaded job is not a change
  feed.WorkerChanged("w-2");
  feed.WorkerChanged("w-1");
  feed.WorkerChanged("w-2");
  feed.JobChanged("job-1");
  feed.NamespaceChanged("job-1/1");
  ChangeFeed::Dirty dirty;
  ASSERT_TRUE(feed.WaitDirtyLocked(&mu, absl::Seconds(30), &dirty));
  EXPECT_EQ(dirty.workers, (std::vector<std::string>{"w-1", "w-2"}));
  EXPECT_EQ(dirty.jobs, (std::vector<std::string>{"job-1"}));
  EXPECT_EQ(dirty.namespaces, (std::vector<std::string>{"job-1/1"}));
  ASSERT_TRUE(feed.WaitDirtyLocked(&mu, absl::Milliseconds(10), &dirty));
  EXPECT_TRUE(dirty.workers.empty());
  EXPECT_TRUE(dirty.jobs.empty());
  EXPECT_TRUE(dirty.namespaces.empty());
}

}  // namespace
}  // namespace shardline::coordinator
