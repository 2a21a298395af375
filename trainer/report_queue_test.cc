#include "trainer/report_queue.h"

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace shardline::trainer {
namespace {

TEST(ReportQueue, PushReturnsWhileTheCoordinatorHangsAndReportsGoInOrder) {
  absl::Notification hung;
  absl::Notification release;
  absl::Mutex mu;
  std::vector<int> sent;
  ReportQueue q;
  q.Push("first", [&] {
    hung.Notify();
    release.WaitForNotification();  // a coordinator that does not answer
    absl::MutexLock lock(&mu);
    sent.push_back(0);
    return absl::OkStatus();
  });
  hung.WaitForNotification();
  for (int i = 1; i <= 3; ++i) {  // the save goes on: none of these waits for the first
    q.Push("next", [&, i] {
      absl::MutexLock lock(&mu);
      sent.push_back(i);
      return absl::UnavailableError("a failure is logged, nothing else");
    });
  }
  {
    absl::MutexLock lock(&mu);
    EXPECT_TRUE(sent.empty());
  }
  release.Notify();
  q.WaitIdle();
  absl::MutexLock lock(&mu);
  EXPECT_EQ(sent, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(q.dropped(), 0);
}

TEST(ReportQueue, AFullQueueDropsTheOldestAndCountsIt) {
  absl::Notification hung;
  absl::Notification release;
  std::vector<int> sent;
  ReportQueue q(/*capacity=*/2);
  q.Push("blocker", [&] {
    hung.Notify();
    release.WaitForNotification();
    return absl::OkStatus();
  });
  hung.WaitForNotification();  // the blocker is in flight, the queue is empty
  for (int i = 1; i <= 4; ++i) {
    q.Push("r", [&sent, i] {
      sent.push_back(i);  // only the queue's thread runs these
      return absl::OkStatus();
    });
  }
  release.Notify();
  q.WaitIdle();
  EXPECT_EQ(sent, (std::vector<int>{3, 4}));
  EXPECT_EQ(q.dropped(), 2);
}

TEST(ReportQueue, DestructionSendsWhatIsQueuedWithinItsDrainTimeout) {
  auto count = std::make_shared<std::atomic<int>>(0);
  {
    ReportQueue q(64, absl::Seconds(30));
    for (int i = 0; i < 5; ++i) {
      q.Push("r", [count] {
        absl::SleepFor(absl::Milliseconds(10));
        ++*count;
        return absl::OkStatus();
      });
    }
  }
  EXPECT_EQ(count->load(), 5);
}

TEST(ReportQueue, DestructionPastItsDrainTimeoutDropsTheRest) {
  auto count = std::make_shared<std::atomic<int>>(0);
  absl::Notification started;
  absl::Notification release;
  {
    ReportQueue q(64, absl::ZeroDuration());
    q.Push("in flight", [&] {
      started.Notify();
      release.WaitForNotification();
      ++*count;
      return absl::OkStatus();
    });
    for (int i = 0; i < 3; ++i) {
      q.Push("queued", [count] {
        ++*count;
        return absl::OkStatus();
      });
    }
    started.WaitForNotification();
    std::thread releaser([&] {
      absl::SleepFor(absl::Milliseconds(50));  // after the destructor set its deadline
      release.Notify();
    });
    releaser.detach();
  }
  EXPECT_EQ(count->load(), 1);  // the report in flight finished; the queued ones were dropped
}

}  // namespace
}  // namespace shardline::trainer
