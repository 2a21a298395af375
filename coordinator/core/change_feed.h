// ChangeFeed: what changed in the coordinator, for the callers that wait on it. Each job has a
// version (one counter for all jobs, so versions start above 0 and only grow); WaitJob callers
// wait for a version above the one they saw. The event-driven server waits for the sets of
// workers (outbox pushes), jobs and rendezvous namespaces changed since its last look. Every
// change wakes every waiter; a waiter re-checks its own condition.
//
// Thread safety: none of its own. CoordinatorCore owns one and calls it only under the core's
// mutex; the Wait*Locked calls take that mutex and release it while they block.
#ifndef SHARDLINE_COORDINATOR_CORE_CHANGE_FEED_H_
#define SHARDLINE_COORDINATOR_CORE_CHANGE_FEED_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace shardline::coordinator {

class ChangeFeed {
 public:
  // Which workers' outboxes, jobs and rendezvous namespaces changed (each reported once).
  struct Dirty {
    std::vector<std::string> workers;
    std::vector<std::string> jobs;
    std::vector<std::string> namespaces;
    std::vector<std::string> votes;  // Jobs whose step votes were decided (or ended).
  };

  // Gives a job reloaded from the state store its first version, without reporting a change.
  void AddJob(const std::string& job_id);
  // A job was submitted or changed: a new version, reported to WaitDirty, waiters woken.
  void JobChanged(const std::string& job_id);
  // A collected job: its version is forgotten (waiters on it get NOT_FOUND).
  void ForgetJob(const std::string& job_id);
  // A worker's outbox changed (push, new stream, worker gone).
  void WorkerChanged(const std::string& worker_id);
  // A rendezvous namespace got a value or was closed.
  void NamespaceChanged(const std::string& ns);
  // A fault-tolerant job's step decision (or the end of its attempt): its waiting votes answer.
  void VotesChanged(const std::string& job_id);

  // The job's current version; 0 for a job the feed does not know.
  int64_t Version(const std::string& job_id) const;

  // Wakes every waiter; from now on WaitForJobLocked and WaitDirtyLocked return at once (callers
  // of WaitLocked check shut_down() before they wait).
  void Shutdown();
  bool shut_down() const { return shutdown_; }

  // Blocks on `mu` (held by the caller, released while blocked) until any change or `deadline`.
  // Returns true when the deadline passed.
  bool WaitLocked(absl::Mutex* mu, absl::Time deadline) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  // Waits until job `job_id`'s version exceeds `after_version`, the deadline passes or the feed
  // shuts down; `*version` gets the version then. OK in the first two cases. Errors: NOT_FOUND
  // for an unknown job; UNAVAILABLE when shut down before the version moved past
  // `after_version`.
  absl::Status WaitForJobLocked(absl::Mutex* mu, const std::string& job_id, int64_t after_version,
                                absl::Time deadline, int64_t* version) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  // Waits up to `wait` until something is dirty (or shutdown), then moves the dirty sets into
  // `*dirty`. Returns false once the feed is shut down.
  bool WaitDirtyLocked(absl::Mutex* mu, absl::Duration wait, Dirty* dirty)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

 private:
  mutable absl::CondVar changed_;
  std::map<std::string, int64_t> versions_;  // by job id
  int64_t next_version_ = 1;
  bool shutdown_ = false;
  std::set<std::string> dirty_workers_;
  std::set<std::string> dirty_jobs_;
  std::set<std::string> dirty_namespaces_;
  std::set<std::string> dirty_votes_;
};

}  // namespace shardline::coordinator

#endif  // SHARDLINE_COORDINATOR_CORE_CHANGE_FEED_H_
