// RetryWithBackoff: calls a fallible operation again, after exponentially growing delays with
// random jitter, until it succeeds, fails for good, the total deadline passes or the caller
// cancels. Used where an answer must eventually arrive but the other side may be down for a
// while (a trainer reporting a committed checkpoint across a coordinator restart).
//
//   BackoffPolicy policy;            // 200 ms, 400 ms, ... up to 10 s each; 5 min in all
//   absl::Status s = RetryWithBackoff(policy, [&] { return client->Report(r); });
//
// Delay k (k = 0, 1, ...) is min(max_delay, initial_delay * multiplier^k) times a uniform factor
// in [1 - jitter, 1 + jitter] (jitter spreads the retries of many ranks or jobs hit by the same
// outage), and never runs past the deadline: the last attempt starts at the deadline at the
// latest, so the whole retry takes at most `total` plus one attempt.
//
// Thread safety: Backoff is not thread-safe; RetryWithBackoff is reentrant.
#ifndef SHARDLINE_COMMON_RETRY_H_
#define SHARDLINE_COMMON_RETRY_H_

#include <cstdint>
#include <functional>
#include <random>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace shardline {

struct BackoffPolicy {
  absl::Duration initial_delay = absl::Milliseconds(200);
  absl::Duration max_delay = absl::Seconds(10);
  double multiplier = 2.0;
  double jitter = 0.2;                      // In [0, 1).
  absl::Duration total = absl::Minutes(5);  // Deadline of all attempts, from the first.
};

// The delays of a policy, one per Next(). `seed` makes the jitter reproducible (tests).
class Backoff {
 public:
  Backoff(const BackoffPolicy& policy, uint64_t seed);
  absl::Duration Next();

 private:
  BackoffPolicy policy_;
  absl::Duration base_;
  std::mt19937_64 rng_;
};

// Whether another attempt may succeed: UNAVAILABLE, DEADLINE_EXCEEDED, ABORTED,
// RESOURCE_EXHAUSTED, INTERNAL, UNKNOWN and CANCELLED (a call cut short) are transient; the
// other codes (a refused request: INVALID_ARGUMENT, NOT_FOUND, FAILED_PRECONDITION, ...) are not.
bool IsRetryable(const absl::Status& status);

struct RetryOptions {
  uint64_t seed = 0;  // Jitter seed; 0 draws one from std::random_device.
  // The clock, and a wait of `d` that returns false when the retry must stop (cancelled).
  // Defaults: absl::Now and absl::SleepFor (never cancelled). Tests pass a fake clock.
  std::function<absl::Time()> now;
  std::function<bool(absl::Duration)> sleep;
  int* attempts = nullptr;  // Receives the number of attempts made.
};

// Calls `attempt` until it returns OK (OK) or an error that IsRetryable says is final (that
// error), or the policy's total has passed (the last error, its message prefixed with "gave up
// after N attempts in <total>: "), or options.sleep returns false (CANCELLED "cancelled after N
// attempts: <last error>"). `attempt` runs at least once.
absl::Status RetryWithBackoff(const BackoffPolicy& policy,
                              const std::function<absl::Status()>& attempt,
                              const RetryOptions& options = {});

}  // namespace shardline

#endif  // SHARDLINE_COMMON_RETRY_H_
