// ProgressRelay: the worker daemon's progress reports on their way to the coordinator, each
// rank's in order, until the coordinator has them durably.
//
// A report is unsent until the coordinator acknowledges it (ReportProgress OK), and then kept
// until the job's durable step (ReportProgressResponse.durable_step: its series is in the
// coordinator's state store up to there) reaches it: a coordinator SIGKILLed and restarted from
// its state dir has lost the points it took since its last durable write (up to
// --metrics_flush_ms), so after the daemon lost the coordinator (CoordinatorLost: a failed
// call, a broken stream) the next Take sends those again, before the unsent ones. The
// coordinator fills its series' holes with them and takes a step it already has as a no-op.
// At most `max_per_rank` of each kind a rank; beyond that the oldest go. (Issue #30.)
//
// Thread safety: every method may be called from any thread (its own mutex); a round (Add,
// Take, then Acknowledged / Unsent for what it took) is one thread's, the daemon's supervisor.
#ifndef SHARDLINE_WORKER_PROGRESS_RELAY_H_
#define SHARDLINE_WORKER_PROGRESS_RELAY_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "proto/coordinator.pb.h"

namespace shardline::worker {

class ProgressRelay {
 public:
  using Key = std::tuple<std::string, int, int, int>;  // job, attempt, rank, generation
  struct Report {
    Key key;
    ProgressReport report;
    std::string credential;  // the attempt's
  };

  explicit ProgressRelay(size_t max_per_rank) : max_per_rank_(max_per_rank) {}

  // Queues a fresh report of its rank behind the older ones.
  void Add(Report report);
  // The coordinator may have restarted: the next Take sends the kept (acknowledged, not yet
  // durable) reports again.
  void CoordinatorLost();
  // This round's reports: per rank oldest first (the kept ones first after CoordinatorLost).
  // Each goes back by Acknowledged or Unsent, or is dropped (refused) by the caller.
  std::vector<Report> Take();
  // `report` was acknowledged; its job is durable up to `durable_step`: every kept report of the
  // job at or below it goes, and `report` is kept unless it is too.
  void Acknowledged(Report report, int64_t durable_step);
  // `report` could not be sent: it goes first in the next round, in the order of these calls.
  void Unsent(Report report);
  // Whether `key` has reports not yet acknowledged (its exit waits for them).
  bool HasUnsent(const Key& key) const;
  // Acknowledged reports of `key` not yet durable.
  size_t Kept(const Key& key) const;
  // Drops everything of `key` (its rank is gone).
  void Forget(const Key& key);

 private:
  struct Rank {
    std::deque<Report> unsent;
    std::deque<Report> kept;
  };
  const size_t max_per_rank_;
  mutable absl::Mutex mu_;
  std::map<Key, Rank> ranks_ ABSL_GUARDED_BY(mu_);
  bool resend_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace shardline::worker

#endif  // SHARDLINE_WORKER_PROGRESS_RELAY_H_
