#include "common/retry.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace shardline {

Backoff::Backoff(const BackoffPolicy& policy, uint64_t seed)
    : policy_(policy), base_(policy.initial_delay), rng_(seed) {}

absl::Duration Backoff::Next() {
  const absl::Duration base = std::min(base_, policy_.max_delay);
  base_ = std::min(base_ * policy_.multiplier, policy_.max_delay);
  const double j = std::clamp(policy_.jitter, 0.0, 0.999);
  std::uniform_real_distribution<double> factor(1.0 - j, 1.0 + j);
  return base * factor(rng_);
}

bool IsRetryable(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kInternal:
    case absl::StatusCode::kUnknown:
    case absl::StatusCode::kCancelled:
      return true;
    default:
      return false;
  }
}

absl::Status RetryWithBackoff(const BackoffPolicy& policy,
                              const std::function<absl::Status()>& attempt,
                              const RetryOptions& options) {
  const std::function<absl::Time()> now =
      options.now ? options.now : std::function<absl::Time()>([] { return absl::Now(); });
  const std::function<bool(absl::Duration)> sleep =
      options.sleep ? options.sleep : std::function<bool(absl::Duration)>([](absl::Duration d) {
        absl::SleepFor(d);
        return true;
      });
  Backoff backoff(policy, options.seed != 0 ? options.seed : std::random_device{}());
  const absl::Time deadline = now() + policy.total;
  int n = 0;
  absl::Status s;
  while (true) {
    s = attempt();
    ++n;
    if (options.attempts != nullptr) *options.attempts = n;
    if (s.ok() || !IsRetryable(s)) return s;
    const absl::Duration left = deadline - now();
    if (left <= absl::ZeroDuration()) {
      return absl::Status(s.code(),
                          absl::StrCat("gave up after ", n, " attempts in ",
                                       absl::FormatDuration(policy.total), ": ", s.message()));
    }
    if (!sleep(std::min(backoff.Next(), left))) {
      return absl::CancelledError(absl::StrCat("cancelled after ", n, " attempts: ", s.message()));
    }
  }
}

}  // namespace shardline
