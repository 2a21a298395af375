#include "checkpoint/commit_reporter.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "common/logging.h"

namespace shardline::checkpoint {

CommitReporter::CommitReporter(const Options& options)
    : options_(options), thread_([this] { Run(); }) {}

CommitReporter::~CommitReporter() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void CommitReporter::Committed(const SaveEvent& event) {
  absl::MutexLock lock(&mu_);
  queue_.push_back({event, absl::Now()});
}

absl::Status CommitReporter::WaitIdle() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](CommitReporter* r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(r->mu_) {
        return r->stop_ || (r->queue_.empty() && !r->busy_);
      },
      this));
  absl::Status s = retention_error_;
  retention_error_ = absl::OkStatus();
  return s;
}

int64_t CommitReporter::acknowledged_step() const {
  absl::MutexLock lock(&mu_);
  return acknowledged_;
}

void CommitReporter::Run() {
  while (true) {
    Pending p;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](CommitReporter* r)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(r->mu_) { return r->stop_ || !r->queue_.empty(); },
          this));
      if (stop_) return;
      p = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
    }
    Settle(p);
    absl::MutexLock lock(&mu_);
    busy_ = false;
  }
}

void CommitReporter::Settle(const Pending& p) {
  const int64_t step = p.event.step;
  BackoffPolicy policy = options_.backoff;
  // The bound counts from the commit: a report queued behind a slow one gets what is left.
  policy.total = std::max(absl::ZeroDuration(), policy.total - (absl::Now() - p.committed));
  RetryOptions retry;
  retry.seed = options_.seed;
  // Waits are cut short by the destructor.
  retry.sleep = [this](absl::Duration d) {
    absl::MutexLock lock(&mu_);
    return !mu_.AwaitWithTimeout(absl::Condition(&stop_), d);
  };
  int attempts = 0;
  retry.attempts = &attempts;
  bool warned = false;
  absl::Status s = RetryWithBackoff(
      policy,
      [&] {
        absl::Status r = options_.report(p.event);
        if (!r.ok() && !warned && IsRetryable(r)) {
          warned = true;
          SL_LOG(WARNING) << "checkpoint step " << step << " (" << p.event.step_dir
                          << ") is committed, but reporting it to the coordinator failed (" << r
                          << "); retrying for up to " << absl::FormatDuration(policy.total)
                          << ", retention waits for the acknowledgement";
        }
        return r;
      },
      retry);
  {
    absl::MutexLock lock(&mu_);
    if (stop_) return;  // Shutting down: neither a warning nor retention.
  }
  if (!s.ok()) {
    SL_LOG(WARNING) << "checkpoint step " << step << " (" << p.event.step_dir
                    << ") is committed on disk but the coordinator did not acknowledge it (" << s
                    << "); retention skipped for this save: nothing is deleted until a later "
                       "save is acknowledged";
    return;
  }
  if (warned) {
    SL_LOG(INFO) << "the coordinator acknowledged checkpoint step " << step << " after " << attempts
                 << " attempts";
  }
  {
    absl::MutexLock lock(&mu_);
    acknowledged_ = std::max(acknowledged_, step);
  }
  absl::StatusOr<std::vector<int64_t>> deleted =
      ApplyRetention(options_.root, options_.keep_last, /*up_to=*/step);
  if (!deleted.ok()) {
    SL_LOG(WARNING) << "retention after checkpoint step " << step << ": " << deleted.status();
    absl::MutexLock lock(&mu_);
    if (retention_error_.ok()) retention_error_ = deleted.status();
  }
}

}  // namespace shardline::checkpoint
