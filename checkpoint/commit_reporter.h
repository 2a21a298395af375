// CommitReporter: the committing rank's order after each commit: report the committed step to
// the coordinator, retried until it acknowledges (bounded), and only then apply retention.
//
//   CommitReporter reporter(options);           // rank 0, one per Checkpointer
//   reporter.Committed(event);                   // after MANIFEST.json is in place; returns at
//   once RETURN_IF_ERROR(reporter.WaitIdle());       // end of training: every report settled
//
// Why this order: the coordinator's registry tells a restarted attempt which step to resume.
// Retention used to run before the report, so with keep_last 1 and a coordinator outage across a
// save the step the registry believed latest was deleted, and every restart failed NOT_FOUND.
// Now retention for a save runs only once the coordinator acknowledged that save's step, and
// only over steps up to it (ApplyRetention's up_to): the step acknowledged last is never deleted
// unless a newer one is acknowledged. A report that is not acknowledged within backoff.total
// (counted from its commit), or that the coordinator refuses, deletes nothing: it logs a
// warning, the checkpoint stays committed on disk and training goes on; a later acknowledged
// save resumes normal retention.
//
// Reports run in commit order on this object's own thread, so neither the training thread nor
// an asynchronous save's thread waits for a coordinator that is down.
//
// Thread safety: Committed and WaitIdle may be called from any thread; the destructor must not
// run concurrently with them.
#ifndef SHARDLINE_CHECKPOINT_COMMIT_REPORTER_H_
#define SHARDLINE_CHECKPOINT_COMMIT_REPORTER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "checkpoint/format.h"
#include "common/retry.h"

namespace shardline::checkpoint {

class CommitReporter {
 public:
  struct Options {
    std::string root;   // Checkpoint root (retention).
    int keep_last = 0;  // 0 keeps all.
    // One attempt at reporting a commit; OK once the coordinator acknowledged it. Errors that
    // IsRetryable (common/retry.h) accepts are retried.
    std::function<absl::Status(const SaveEvent&)> report;
    BackoffPolicy backoff;  // total: the bound per commit, counted from Committed().
    uint64_t seed = 0;      // Jitter (0: random).
  };

  explicit CommitReporter(const Options& options);
  // Stops at once: a report still retrying is abandoned (its retention is not run).
  ~CommitReporter();

  // Queues the commit of event.step (event.manifest_committed); returns at once.
  void Committed(const SaveEvent& event);
  // Waits until every queued commit was acknowledged (and its retention ran) or given up.
  // Returns the first retention error since the last call (I/O deleting old checkpoints); an
  // unacknowledged report is only logged, not an error.
  absl::Status WaitIdle();

  // The newest step the coordinator acknowledged (-1: none yet).
  int64_t acknowledged_step() const;

 private:
  struct Pending {
    SaveEvent event;
    absl::Time committed;
  };
  void Run();
  void Settle(const Pending& p);

  const Options options_;
  mutable absl::Mutex mu_;
  std::deque<Pending> queue_ ABSL_GUARDED_BY(mu_);
  bool busy_ ABSL_GUARDED_BY(mu_) = false;  // Run() is handling a popped item.
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  int64_t acknowledged_ ABSL_GUARDED_BY(mu_) = -1;
  absl::Status retention_error_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace shardline::checkpoint

#endif  // SHARDLINE_CHECKPOINT_COMMIT_REPORTER_H_
