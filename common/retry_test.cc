#include "common/retry.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shardline {
namespace {

using ::testing::HasSubstr;

// A clock that only moves when the retry sleeps (or an attempt takes time).
struct FakeTime {
  absl::Time now = absl::FromUnixSeconds(1000);
  std::vector<absl::Duration> sleeps;
  RetryOptions Options(int* attempts) {
    RetryOptions o;
    o.seed = 42;
    o.now = [this] { return now; };
    o.sleep = [this](absl::Duration d) {
      sleeps.push_back(d);
      now += d;
      return true;
    };
    o.attempts = attempts;
    return o;
  }
};

TEST(Backoff, DelaysGrowByTheMultiplierWithinTheJitterUpToTheMax) {
  BackoffPolicy p;
  p.initial_delay = absl::Milliseconds(100);
  p.max_delay = absl::Seconds(1);
  p.multiplier = 2;
  p.jitter = 0.25;
  Backoff b(p, 7);
  const double bases_ms[] = {100, 200, 400, 800, 1000, 1000, 1000};
  for (double base : bases_ms) {
    const double d = absl::ToDoubleMilliseconds(b.Next());
    EXPECT_GE(d, base * 0.75) << base;
    EXPECT_LE(d, base * 1.25) << base;
  }
}

TEST(Backoff, JitterDiffersBetweenSeedsAndRepeatsForOneSeed) {
  BackoffPolicy p;
  Backoff a(p, 1), b(p, 2), c(p, 1);
  const absl::Duration da = a.Next(), db = b.Next(), dc = c.Next();
  EXPECT_NE(da, db);
  EXPECT_EQ(da, dc);
}

TEST(RetryWithBackoff, RetriesTransientErrorsUntilSuccess) {
  FakeTime t;
  int attempts = 0, calls = 0;
  absl::Status s = RetryWithBackoff(
      BackoffPolicy(),
      [&] { return ++calls < 4 ? absl::UnavailableError("down") : absl::OkStatus(); },
      t.Options(&attempts));
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(attempts, 4);
  ASSERT_EQ(t.sleeps.size(), 3u);
  EXPECT_LT(t.sleeps[0], t.sleeps[2]);  // Exponential: 200 ms vs 800 ms, +-20%.
}

TEST(RetryWithBackoff, GivesUpAtTheTotalDeadlineWithTheLastError) {
  FakeTime t;
  BackoffPolicy p;
  p.initial_delay = absl::Milliseconds(100);
  p.max_delay = absl::Seconds(2);
  p.total = absl::Seconds(10);
  const absl::Time start = t.now;
  int attempts = 0;
  absl::Status s = RetryWithBackoff(
      p, [] { return absl::UnavailableError("connection refused"); }, t.Options(&attempts));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr(" attempts in 10s: connection refused"));
  EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("gave up after ", attempts, " attempts")));
  // The last sleep is cut to the deadline and one attempt is made there: never later.
  EXPECT_EQ(t.now - start, absl::Seconds(10));
  EXPECT_GT(attempts, 5);
  EXPECT_LT(attempts, 20);
  for (absl::Duration d : t.sleeps) EXPECT_LE(d, absl::Seconds(2) * 1.2);
}

TEST(RetryWithBackoff, FinalErrorIsNotRetried) {
  FakeTime t;
  int attempts = 0;
  absl::Status s = RetryWithBackoff(
      BackoffPolicy(), [] { return absl::FailedPreconditionError("attempt 1 is not running"); },
      t.Options(&attempts));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "attempt 1 is not running");
  EXPECT_EQ(attempts, 1);
  EXPECT_TRUE(t.sleeps.empty());
}

TEST(RetryWithBackoff, CancelledSleepStopsTheRetry) {
  FakeTime t;
  int attempts = 0;
  RetryOptions o = t.Options(&attempts);
  o.sleep = [](absl::Duration) { return false; };
  absl::Status s = RetryWithBackoff(
      BackoffPolicy(), [] { return absl::UnavailableError("down"); }, o);
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(s.message(), "cancelled after 1 attempts: down");
  EXPECT_EQ(attempts, 1);
}

TEST(RetryWithBackoff, ZeroTotalMakesExactlyOneAttempt) {
  FakeTime t;
  BackoffPolicy p;
  p.total = absl::ZeroDuration();
  int attempts = 0;
  absl::Status s = RetryWithBackoff(
      p, [] { return absl::UnavailableError("down"); }, t.Options(&attempts));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(attempts, 1);
}

}  // namespace
}  // namespace shardline
