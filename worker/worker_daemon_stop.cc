// The worker daemon's stop thread (StopLoop) and what it acts on: a stop sends SIGTERM at once
// and sets each rank's SIGKILL deadline (StopWhereLocked, from the stream thread or Run); the
// thread sends the SIGKILLs that fall due and reaps the killed. Nothing here waits for a rank
// while holding up the stream (worker_daemon.h, "STOP").
#include "worker/worker_daemon.h"

#include <algorithm>

#include "common/logging.h"

namespace shardline::worker {
namespace {

// How often StopLoop polls a SIGKILLed rank until it is reaped (and Run a stopped one).
constexpr absl::Duration kReapPoll = absl::Milliseconds(20);

}  // namespace

void WorkerDaemon::StopWhereLocked(const std::function<bool(const RankKey&)>& which,
                                   absl::Duration grace) {
  const absl::Time kill_at = absl::Now() + grace;
  for (auto& [key, rank] : ranks_) {
    if (!which(key) || rank.process == nullptr || rank.process->Poll().has_value()) continue;
    if (rank.kill_at == absl::InfiniteFuture()) rank.process->Terminate();  // the first STOP
    rank.kill_at = std::min(rank.kill_at, kill_at);
  }
  deferred_starts_.erase(
      std::remove_if(deferred_starts_.begin(), deferred_starts_.end(),
                     [&](const Assignment& a) {
                       return which(RankKey{a.job_id(), a.attempt(), a.rank(), a.generation()});
                     }),
      deferred_starts_.end());
  stop_cv_.SignalAll();
}

void WorkerDaemon::StopLoop() {
  absl::MutexLock lock(&mu_);
  while (!stop_loop_done_) {
    const absl::Time now = absl::Now();
    absl::Time wake = absl::InfiniteFuture();
    for (auto& [key, r] : ranks_) {
      if (r.process == nullptr || r.kill_at == absl::InfiniteFuture()) continue;
      if (r.process->Poll().has_value()) continue;  // ended (and reaped)
      if (r.kill_at > now) {
        wake = std::min(wake, r.kill_at);
        continue;
      }
      if (!r.killed) {
        SL_LOG(WARNING) << "rank " << r.assignment.rank() << " of " << r.assignment.job_id()
                        << " attempt " << r.assignment.attempt()
                        << " still runs at the end of its grace period: SIGKILL";
        r.process->Kill();
        r.killed = true;
      }
      wake = std::min(wake, now + kReapPoll);  // reap it soon
    }
    stop_cv_.WaitWithDeadline(&mu_, wake);
  }
}

void WorkerDaemon::StopAllAndEndStopLoop() {
  // Every rank still running, all at once: SIGTERM now, SIGKILL (StopLoop) after the grace
  // period. (They used to be stopped one after another, up to a grace period each.)
  absl::MutexLock lock(&mu_);
  StopWhereLocked([](const RankKey&) { return true; }, options_.grace_period);
  auto running = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (auto& [key, rank] : ranks_) {
      if (rank.process != nullptr && !rank.process->Poll().has_value()) return true;
    }
    return false;
  };
  while (running()) stop_cv_.WaitWithTimeout(&mu_, kReapPoll);
  stop_loop_done_ = true;
  stop_cv_.SignalAll();
}

}  // namespace shardline::worker
