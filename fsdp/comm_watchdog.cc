#include "fsdp/comm_watchdog.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace shardline::fsdp {

CommWatchdog::CommWatchdog(std::string members, absl::Duration timeout, Hooks hooks)
    : members_(std::move(members)), timeout_(timeout), hooks_(std::move(hooks)) {}

CommWatchdog::~CommWatchdog() { Stop(); }

void CommWatchdog::Start(absl::Duration interval) {
  thread_ = std::thread([this, interval] {
    absl::MutexLock lock(&mu_);
    while (!stop_) {
      // Sleeps until the next tick or Stop(); Tick takes the lock itself.
      mu_.AwaitWithTimeout(absl::Condition(&stop_), interval);
      if (stop_) break;
      mu_.Unlock();
      Tick();
      mu_.Lock();
    }
  });
}

void CommWatchdog::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<CommWatchdog::Work> CommWatchdog::Add(std::string prefix, absl::Time deadline,
                                                      Poll poll) {
  std::shared_ptr<Work> work(new Work(std::move(prefix), deadline, std::move(poll)));
  absl::MutexLock lock(&mu_);
  if (aborted_) {
    work->finished_ = true;
    work->status_ = absl::Status(
        failure_.code(),
        absl::StrCat(work->prefix(), "aborted after an earlier error: ", failure_.message()));
    return work;
  }
  pending_.push_back(work);
  return work;
}

absl::Status CommWatchdog::TimedOut(const Work& work) const {
  return absl::DeadlineExceededError(absl::StrCat(work.prefix(), "timed out after ",
                                                  absl::FormatDuration(timeout_), " ", members_));
}

int CommWatchdog::Tick() {
  bool abort = false;
  int pending = 0;
  {
    absl::MutexLock lock(&mu_);
    pending = TickLocked(&abort);
  }
  // Outside the lock (see FailLocked): a slow ncclCommAbort must not hold up StatusOf, Wait or
  // AsyncError on the issuing thread.
  if (abort) hooks_.abort();
  return pending;
}

int CommWatchdog::TickLocked(bool* abort) {
  if (aborted_) return 0;
  const absl::Time now = hooks_.now();
  for (auto it = pending_.begin(); it != pending_.end();) {
    Work& work = **it;
    std::string error;
    const PollResult r = work.poll_(&error);
    if (r == PollResult::kDone) {
      work.finished_ = true;
      it = pending_.erase(it);
      continue;
    }
    if (r == PollResult::kError) {
      *abort = FailLocked(
          absl::UnavailableError(absl::StrCat(work.prefix(), "CUDA error: ", error)), &work);
      return 0;
    }
    if (now > work.deadline()) {
      *abort = FailLocked(TimedOut(work), &work);
      return 0;
    }
    ++it;
  }
  if (!pending_.empty()) {
    const std::string async = hooks_.async_error();
    if (!async.empty()) {
      Work& oldest = *pending_.front();
      *abort = FailLocked(absl::UnavailableError(absl::StrCat(oldest.prefix(), "lost a peer ",
                                                              members_, ": NCCL error: ", async)),
                          &oldest);
      return 0;
    }
  }
  return static_cast<int>(pending_.size());
}

bool CommWatchdog::FailLocked(absl::Status cause, Work* culprit) {
  if (failure_.ok()) failure_ = cause;
  // Marked before the abort runs: WithComm refuses every communicator call from here on, so the
  // caller may run the abort after releasing the lock (no call can start on the communicator
  // while, or after, it is freed).
  const bool first = !aborted_;
  aborted_ = true;
  const absl::Time now = hooks_.now();
  for (const std::shared_ptr<Work>& w : pending_) {
    w->finished_ = true;
    if (w.get() == culprit) {
      w->status_ = cause;
    } else if (now > w->deadline()) {
      w->status_ = TimedOut(*w);
    } else {
      w->status_ = absl::Status(
          failure_.code(),
          absl::StrCat(w->prefix(), "aborted after an earlier error: ", failure_.message()));
    }
  }
  pending_.clear();
  return first;
}

absl::Status CommWatchdog::StatusOf(const Work& work) const {
  absl::MutexLock lock(&mu_);
  return work.status_;
}

absl::Status CommWatchdog::Block(const Work& work) const {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(&work.finished_));
  return work.status_;
}

absl::Status CommWatchdog::failure() const {
  absl::MutexLock lock(&mu_);
  return failure_;
}

bool CommWatchdog::aborted() const {
  absl::MutexLock lock(&mu_);
  return aborted_;
}

absl::Status CommWatchdog::WithComm(const std::function<absl::Status()>& call) {
  absl::MutexLock lock(&mu_);
  if (aborted_) return failure_;
  return call();
}

absl::Status CommWatchdog::Fail(absl::Status cause) {
  {
    absl::MutexLock lock(&mu_);
    if (aborted_) return failure_;
    FailLocked(cause, nullptr);
  }
  hooks_.abort();  // Outside the lock, as in Tick.
  return cause;
}

}  // namespace shardline::fsdp
