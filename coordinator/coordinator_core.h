// CoordinatorCore: the coordinator's whole behaviour without gRPC. The service (service.h) is a
// thin adapter over it; tests drive it directly with a fake clock.
//
// What it ties together: the worker registry (liveness), the job queue and its gang scheduler
// (priority, then submission order; all W ranks placed at once or none), the planner, the job
// state machine (attempts, restarts from the latest committed checkpoint, elastic shrinking), the
// checkpoint registry, the rendezvous store, progress, and durable state (state_store.h).
//
// Scheduling is strict per device kind: when the first eligible job of a kind does not fit,
// later jobs of that kind wait too, so a large job is not starved by a stream of small ones.
//
// Assignment streams: each worker has an outbox. Opening a stream (OpenAssignmentStream)
// supersedes any older stream of that worker and first re-queues a START for every rank placed
// on it that the worker has not yet acknowledged (a heartbeat listing the rank in any state
// acknowledges it), so a START lost with a broken stream is delivered again. A daemon should
// still ignore a START for a (job, attempt, rank) it already runs: a START delivered just before
// the stream broke, and not yet acknowledged, is sent again.
//
// Restart of the coordinator: every job, event, checkpoint record and worker is reloaded.
// Workers known ALIVE get one heartbeat timeout to heartbeat again (their ids stay valid); a
// RUNNING job keeps its placement and rendezvous secret, so its ranks go on; if a worker of it
// does not come back in time, the attempt fails as WORKER_LOST and the job restarts from its
// latest committed checkpoint (or fails when no restarts are left). Rendezvous values are not
// persisted (ranks read them only while bootstrapping).
//
// Stale ranks: a heartbeat listing a running rank of an attempt that is over (the worker was cut
// off while the attempt failed, so its STOP never arrived) gets a STOP for that attempt pushed to
// the worker's stream, once per stream.
//
// Lost ranks: once a worker's heartbeat has listed a rank of a running attempt, every later
// heartbeat of that worker must list it until it exits; a heartbeat without it fails the attempt
// as RANK_LOST (a restarted daemon no longer knows the ranks its predecessor ran).
//
// Thread safety: every method may be called from any thread. Blocking calls (NextAssignment,
// WaitJob, RendezvousGet) block only their caller, up to the given wait.
#ifndef SHARDLINE_COORDINATOR_COORDINATOR_CORE_H_
#define SHARDLINE_COORDINATOR_COORDINATOR_CORE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/checkpoint_registry.h"
#include "coordinator/clock.h"
#include "coordinator/planner.h"
#include "coordinator/rendezvous_store.h"
#include "coordinator/state.pb.h"
#include "coordinator/state_store.h"
#include "coordinator/worker_registry.h"
#include "proto/coordinator.pb.h"

namespace shardline::coordinator {

struct CoreOptions {
  // Required; must outlive the core.
  const Clock* clock = nullptr;
  // Directory of the SQLite database; empty keeps state in memory only (tests).
  std::string state_dir;
  absl::Duration heartbeat_interval = absl::Seconds(2);
  absl::Duration heartbeat_timeout = absl::Seconds(10);
  // A rank its worker has not listed in a heartbeat this long after the attempt started fails
  // the attempt (RANK_START_TIMEOUT): its START was never received or acted on.
  absl::Duration rank_start_timeout = absl::Minutes(2);
  // Seconds between SIGTERM and SIGKILL that STOP assignments carry.
  int32_t stop_grace_period_s = 10;
  // Longest wait a RendezvousGet may ask for (longer requests are capped; clients loop).
  absl::Duration max_rendezvous_wait = absl::Seconds(60);
  // Full job spec validation (spec::Validate); the core always checks name and world_size
  // itself. Null: only those basic checks.
  std::function<absl::Status(const JobSpec&)> validate_spec;
};

class CoordinatorCore {
 public:
  // Opens the state store (when state_dir is set) and reloads everything in it.
  // Errors: INVALID_ARGUMENT without a clock; the store's errors.
  static absl::StatusOr<std::unique_ptr<CoordinatorCore>> Create(const CoreOptions& options);
  ~CoordinatorCore();

  // ---- workers
  absl::StatusOr<RegisterWorkerResponse> RegisterWorker(const RegisterWorkerRequest& req);
  // Unknown or dead workers get reregister = true (not an error). Rank statuses of the current
  // attempts are applied: exit 0 counts towards success, any other exit fails the attempt.
  absl::StatusOr<HeartbeatResponse> Heartbeat(const HeartbeatRequest& req);
  // Starts a new assignment stream for `worker_id`; returns its generation.
  // Errors: NOT_FOUND for an unknown worker, FAILED_PRECONDITION for a dead one.
  absl::StatusOr<int64_t> OpenAssignmentStream(const std::string& worker_id);
  // Waits up to `wait` for the stream's next assignment. true: *out holds it; false: nothing
  // yet. Errors: ABORTED when a newer stream of the worker superseded this one, UNAVAILABLE when
  // the coordinator shuts down.
  absl::StatusOr<bool> NextAssignment(const std::string& worker_id, int64_t generation,
                                      absl::Duration wait, Assignment* out);
  std::vector<WorkerInfo> ListWorkers() const;
  // Errors: NOT_FOUND.
  absl::StatusOr<WorkerInfo> GetWorker(const std::string& worker_id) const {
    return registry_.Get(worker_id);
  }

  // ---- rendezvous (see rendezvous_store.h for the errors)
  absl::Status RendezvousSet(const RendezvousSetRequest& req);
  absl::StatusOr<RendezvousGetResponse> RendezvousGet(const RendezvousGetRequest& req);
  // One non-blocking look (for the event-driven server path): DEADLINE_EXCEEDED while keys are
  // missing, its message naming them and `waited`.
  absl::StatusOr<RendezvousGetResponse> RendezvousPoll(const RendezvousGetRequest& req,
                                                       absl::Duration waited);
  // The wait a RendezvousGet request gets: timeout_ms capped by max_rendezvous_wait.
  absl::Duration RendezvousWait(const RendezvousGetRequest& req) const;

  // ---- reports from ranks. Errors: NOT_FOUND (job), FAILED_PRECONDITION for a report of an
  // attempt that is not the job's running one, INVALID_ARGUMENT for a rank outside the world
  // (and for a negative progress step or memory figure; see CheckpointRegistry::Report for the
  // checkpoint report's own checks).
  absl::Status ReportProgress(const ProgressReport& report);
  absl::Status ReportCheckpoint(const CheckpointReport& report);

  // ---- jobs
  // Errors: INVALID_ARGUMENT naming the field; UNAVAILABLE when the job cannot be stored.
  absl::StatusOr<std::string> SubmitJob(const JobSpec& spec);
  absl::StatusOr<JobStatus> GetJob(const std::string& job_id) const;
  // Jobs in any of `states` (empty: all), in submission order.
  std::vector<JobStatus> ListJobs(const std::vector<JobState>& states) const;
  // Errors: NOT_FOUND; FAILED_PRECONDITION for a finished job.
  absl::Status CancelJob(const std::string& job_id, const std::string& reason);
  // The job's status once its version exceeds `after_version` (or after `wait`, whichever comes
  // first); `*version` receives the version returned. Versions start above 0.
  absl::StatusOr<JobStatus> WaitJob(const std::string& job_id, int64_t after_version,
                                    absl::Duration wait, int64_t* version) const;

  // Non-blocking: the job's status when its version exceeds `after_version`, else nullopt
  // (`*version` gets the current version either way). Errors: NOT_FOUND; UNAVAILABLE once the
  // core shuts down.
  absl::StatusOr<std::optional<JobStatus>> JobIfNewer(const std::string& job_id,
                                                      int64_t after_version,
                                                      int64_t* version) const;

  // ---- checkpoints
  absl::StatusOr<std::vector<CheckpointInfo>> ListCheckpoints(const std::string& job_id) const;
  // Reads <path>/MANIFEST.json when this machine sees the path; otherwise the manifest is empty.
  absl::StatusOr<GetCheckpointResponse> GetCheckpoint(const std::string& job_id,
                                                      int64_t step) const;

  // Reaps dead workers (failing their jobs' attempts) and schedules what fits. The server calls
  // it periodically; tests call it after moving the fake clock.
  void Tick();
  // Wakes every blocked caller with UNAVAILABLE; later blocking calls return at once.
  void Shutdown();

  // For event-driven streams: waits up to `wait` until some worker's outbox, job or rendezvous
  // namespace changed since the last call, and returns which (each change is reported once, to
  // one caller). Returns false once the core shuts down.
  struct Dirty {
    std::vector<std::string> workers;
    std::vector<std::string> jobs;
    std::vector<std::string> namespaces;
  };
  bool WaitDirty(absl::Duration wait, Dirty* dirty);

  int alive_workers() const { return registry_.alive_count(); }

  // For metrics. Counters count since this process started.
  struct Counters {
    std::map<JobState, int> jobs_by_state;
    int64_t attempts_started = 0;
    int64_t attempts_failed = 0;
    int64_t restarts = 0;
  };
  Counters counters() const;

 private:
  struct Job {
    JobRecord rec;
    int64_t version = 0;
    // Ranks of the current attempt whose worker has reported them in a heartbeat (so the
    // daemon has the START). Not persisted: after a coordinator restart all count as acked.
    std::set<int32_t> acked;
  };
  struct Outbox {
    std::deque<Assignment> queue;
    int64_t generation = 0;
  };

  explicit CoordinatorCore(const CoreOptions& options);
  absl::Status Load();

  Job* FindJob(const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The job whose current attempt `attempt` is RUNNING with `rank` in its world, for reports
  // from ranks. Errors: NOT_FOUND (no such job), FAILED_PRECONDITION (not running, or another
  // attempt), INVALID_ARGUMENT (rank outside the world).
  absl::StatusOr<Job*> FindRunningRankLocked(const std::string& job_id, int32_t attempt,
                                             int32_t rank) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Persists and publishes a changed job (bumps its version, wakes watchers).
  void Changed(Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ScheduleLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status StartAttemptLocked(Job& job, const Plan& plan) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Stops the running attempt's ranks, frees its slots and closes its rendezvous namespace.
  void EndAttemptLocked(Job& job, bool send_stop) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FailAttemptLocked(Job& job, const std::string& kind, const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ApplyRankStatusLocked(const std::string& worker_id, const RankStatus& rs)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `local_world` is the number of this attempt's ranks on p's worker; `master_addr` rank 0's
  // node address (both shared by all ranks, so callers compute them once).
  Assignment StartAssignment(const Job& job, const RankPlacement& p, int32_t local_world,
                             const std::string& master_addr) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Pushes START for the ranks of `job` placed on `worker_id` (all workers when empty).
  void PushStartsLocked(const Job& job, const std::string& worker_id, Outbox* only)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Push(const std::string& worker_id, Assignment a) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PersistWorker(const std::string& worker_id);
  static std::string Namespace(const JobRecord& rec);

  const CoreOptions options_;
  const Clock* clock_;
  std::unique_ptr<StateStore> store_;  // null: in memory only
  WorkerRegistry registry_;            // own lock
  RendezvousStore rendezvous_;         // own lock

  mutable absl::Mutex mu_;
  // Signalled on every job change and outbox push (waiters re-check their own condition).
  mutable absl::CondVar changed_;
  std::map<std::string, Job> jobs_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Outbox> outboxes_ ABSL_GUARDED_BY(mu_);
  // Per worker: (job, rank) of running attempts it has acknowledged and not finished; a
  // heartbeat that omits one of them means the rank is gone.
  std::map<std::string, std::set<std::pair<std::string, int32_t>>> running_ranks_
      ABSL_GUARDED_BY(mu_);
  CheckpointRegistry checkpoints_ ABSL_GUARDED_BY(mu_);
  int64_t next_seq_ ABSL_GUARDED_BY(mu_) = 1;
  int64_t next_version_ ABSL_GUARDED_BY(mu_) = 1;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  Counters counters_ ABSL_GUARDED_BY(mu_);  // jobs_by_state filled on read
  std::set<std::string> dirty_workers_ ABSL_GUARDED_BY(mu_);
  // (worker, job, attempt) told to STOP because it reported ranks of an attempt that is over.
  std::set<std::tuple<std::string, std::string, int32_t>> stops_sent_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> dirty_jobs_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> dirty_namespaces_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shardline::coordinator

#endif  // SHARDLINE_COORDINATOR_COORDINATOR_CORE_H_
