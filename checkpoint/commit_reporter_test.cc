#include "checkpoint/commit_reporter.h"

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/testing/temp_dir.h"
#include "gtest/gtest.h"

namespace shardline::checkpoint {
namespace {

// A committed step as far as listing and retention are concerned: step_N/MANIFEST.json.
void Commit(const std::string& root, int64_t step) {
  std::filesystem::create_directories(StepDir(root, step));
  std::ofstream(absl::StrCat(StepDir(root, step), "/", kManifestFile)) << "{}";
}

SaveEvent Event(const std::string& root, int64_t step) {
  SaveEvent e;
  e.step = step;
  e.step_dir = StepDir(root, step);
  e.files = {kManifestFile, DataFileName(0)};
  e.manifest_committed = true;
  e.expected_files = 1;
  return e;
}

CommitReporter::Options Fast(const std::string& root, int keep_last,
                             std::function<absl::Status(const SaveEvent&)> report) {
  CommitReporter::Options o;
  o.root = root;
  o.keep_last = keep_last;
  o.report = std::move(report);
  o.backoff.initial_delay = absl::Milliseconds(5);
  o.backoff.max_delay = absl::Milliseconds(20);
  o.backoff.total = absl::Milliseconds(300);
  o.seed = 3;
  return o;
}

std::vector<int64_t> Steps(const std::string& root) { return *ListCommittedSteps(root); }

TEST(CommitReporter, UnacknowledgedReportDeletesNothing) {
  // Issue #21 item 2: with keep_last 1 and the coordinator down across a save, retention used
  // to delete the step the coordinator's registry believed latest (3 here) right after the
  // commit of 6. Now nothing is deleted until 6 is acknowledged; the report is retried until
  // its bound and then given up.
  const std::string root = FreshTempDir("unacknowledged");
  Commit(root, 3);
  Commit(root, 6);
  std::atomic<int> calls{0};
  CommitReporter r(Fast(root, 1, [&](const SaveEvent&) {
    ++calls;
    return absl::UnavailableError("connection refused");
  }));
  const absl::Time start = absl::Now();
  r.Committed(Event(root, 6));
  EXPECT_TRUE(r.WaitIdle().ok());
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(300));  // retried for the whole bound
  EXPECT_GT(calls.load(), 3);
  EXPECT_EQ(Steps(root), (std::vector<int64_t>{3, 6}));
  EXPECT_EQ(r.acknowledged_step(), -1);
}

TEST(CommitReporter, RefusedReportIsNotRetriedAndDeletesNothing) {
  const std::string root = FreshTempDir("refused");
  Commit(root, 3);
  Commit(root, 6);
  std::atomic<int> calls{0};
  CommitReporter r(Fast(root, 1, [&](const SaveEvent&) {
    ++calls;
    return absl::FailedPreconditionError("attempt 1 of job j is not running");
  }));
  r.Committed(Event(root, 6));
  EXPECT_TRUE(r.WaitIdle().ok());
  EXPECT_EQ(calls.load(), 1);
  EXPECT_EQ(Steps(root), (std::vector<int64_t>{3, 6}));
}

TEST(CommitReporter, RetentionRunsOnlyAfterTheAcknowledgement) {
  const std::string root = FreshTempDir("acknowledged");
  Commit(root, 3);
  Commit(root, 6);
  std::filesystem::create_directories(StepDir(root, 5));  // An interrupted save's leftovers.
  absl::Mutex mu;
  std::vector<std::vector<int64_t>> seen;  // On disk at each report attempt.
  CommitReporter r(Fast(root, 1, [&](const SaveEvent& e) {
    absl::MutexLock lock(&mu);
    seen.push_back(Steps(root));
    EXPECT_EQ(e.step, 6);
    EXPECT_TRUE(e.manifest_committed);
    return seen.size() < 3 ? absl::UnavailableError("coordinator restarting") : absl::OkStatus();
  }));
  r.Committed(Event(root, 6));
  EXPECT_TRUE(r.WaitIdle().ok());
  ASSERT_EQ(seen.size(), 3u);
  for (const auto& steps : seen) EXPECT_EQ(steps, (std::vector<int64_t>{3, 6}));
  EXPECT_EQ(Steps(root), (std::vector<int64_t>{6}));
  EXPECT_FALSE(std::filesystem::exists(StepDir(root, 5)));
  EXPECT_EQ(r.acknowledged_step(), 6);
}

TEST(CommitReporter, AcknowledgedStepSurvivesANewerUnacknowledgedOne) {
  // 6 is acknowledged, 9 is not: keep_last 1 keeps 6 (the registry's latest) and 9; a later
  // acknowledged 12 resumes normal retention.
  const std::string root = FreshTempDir("newer");
  Commit(root, 3);
  Commit(root, 6);
  Commit(root, 9);
  CommitReporter r(Fast(root, 1, [&](const SaveEvent& e) {
    if (e.step == 9) return absl::UnavailableError("down");
    return absl::OkStatus();
  }));
  r.Committed(Event(root, 6));
  r.Committed(Event(root, 9));
  EXPECT_TRUE(r.WaitIdle().ok());
  EXPECT_EQ(Steps(root), (std::vector<int64_t>{6, 9}));
  EXPECT_EQ(r.acknowledged_step(), 6);
  Commit(root, 12);
  r.Committed(Event(root, 12));
  EXPECT_TRUE(r.WaitIdle().ok());
  EXPECT_EQ(Steps(root), (std::vector<int64_t>{12}));
  EXPECT_EQ(r.acknowledged_step(), 12);
}

TEST(CommitReporter, ReportsRunInCommitOrderOffTheCallersThread) {
  const std::string root = FreshTempDir("order");
  absl::Notification release;
  absl::Mutex mu;
  std::vector<int64_t> order;
  CommitReporter r(Fast(root, 0, [&](const SaveEvent& e) {
    release.WaitForNotification();
    absl::MutexLock lock(&mu);
    order.push_back(e.step);
    return absl::OkStatus();
  }));
  const absl::Time start = absl::Now();
  for (int64_t step : {2, 4, 6}) {
    Commit(root, step);
    r.Committed(Event(root, step));  // Returns at once although the reports block.
  }
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  release.Notify();
  EXPECT_TRUE(r.WaitIdle().ok());
  EXPECT_EQ(order, (std::vector<int64_t>{2, 4, 6}));
  EXPECT_EQ(Steps(root), (std::vector<int64_t>{2, 4, 6}));  // keep_last 0 keeps all
}

TEST(CommitReporter, DestructorAbandonsARetryingReportAtOnce) {
  const std::string root = FreshTempDir("abandon");
  Commit(root, 3);
  Commit(root, 6);
  CommitReporter::Options o =
      Fast(root, 1, [](const SaveEvent&) { return absl::UnavailableError("down"); });
  o.backoff.initial_delay = absl::Seconds(5);
  o.backoff.max_delay = absl::Seconds(5);
  o.backoff.total = absl::Minutes(10);
  const absl::Time start = absl::Now();
  {
    CommitReporter r(o);
    r.Committed(Event(root, 6));
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  EXPECT_EQ(Steps(root), (std::vector<int64_t>{3, 6}));
}

}  // namespace
}  // namespace shardline::checkpoint
