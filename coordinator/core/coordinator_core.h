// CoordinatorCore: the coordinator's whole behaviour without gRPC. The service (service.h) is a
// thin adapter over it; tests drive it directly with a fake clock.
//
// The core owns the job lifecycle (submit, start an attempt, fail / restart it, succeed, cancel;
// the rules are job_state_machine.h's) and the durable state (state_store.h, written in order
// off the mutex by state_writer.h), and delegates:
//   worker_registry.h      workers, heartbeat liveness, slot reservations   (own lock)
//   draining_slots.h       slots still held by stopped ranks of ended attempts
//   scheduler.h            queue + free slots -> placements (pure; planner.h places ranks)
//   assignment_outbox.h    per-worker START / STOP queues and stream delivery
//   rank_tracker.h         rank liveness (acked / running / stale / lost / start timeout); it
//                          returns the failures and STOPs, the core applies them
//   change_feed.h          job versions, WaitJob / WaitDirty, wake-ups
//   job_table.h            the job records: ids, lookup, listing, persistence of changes
//   checkpoint_registry.h  committed checkpoints, retention
//   rendezvous_store.h     per-attempt KV namespaces                         (own lock)
//   attempt_credentials.h  running attempts' credentials -> job and attempt  (own lock)
//   rank_reports.h         what progress and checkpoint reports change
//   manifest_fetch.h       GetCheckpoint's bounded MANIFEST.json read
//   training_metrics.h     each job's per-step training series, batched writes  (own lock)
//   job_logs.h             the ranks' log lines the workers ship                (own lock)
//   replica_quorum.h       fault_tolerance REPLICA_GROUPS: each running attempt's per-step
//                          vote, membership epochs, lost and rejoining replica groups
// Job table, outbox, tracker, feed, draining slots and checkpoint registry have no lock of their
// own: the core calls them only under its mutex. coordinator_core.cc holds the job lifecycle and
// the job, report and checkpoint calls; coordinator_core_workers.cc the worker protocol;
// coordinator_core_observability.cc the logs and training-metrics calls;
// coordinator_core_ft.cc replica-group fault tolerance (StepVote, lost groups, replacements).
//
// Replica-group fault tolerance (docs/failures.md): a rank failure of a REPLICA_GROUPS job
// (non-zero exit, RANK_LOST, WORKER_LOST, a replacement's start timeout) goes to the attempt's
// ReplicaQuorum instead of failing the attempt, while at least min_replicas groups live: event
// REPLICA_GROUP_LOST, STOP_RANK to the group's other ranks (their exits are expected), their
// slots drain as usual, and a replacement group is placed as soon as S slots are free (the
// failed node's worker first), with the ranks' placement generation + 1; REPLICA_GROUP_HEALED
// when a commit admits it. The job succeeds when every rank of every live group exited 0.
// Fewer than min_replicas groups fail the attempt as without fault tolerance.
//
// Credentials: RegisterWorker issues each worker a random credential (the registry keeps its
// SHA-256, stored too); each attempt's rendezvous secret is its attempt credential, valid from
// its start to its end (attempt_credentials.h). The service checks both before calling in.
//
// Restart of the coordinator: every job, event, checkpoint record and worker (with its
// credential digest) is reloaded. Workers known ALIVE get one heartbeat timeout to heartbeat
// again (their ids and credentials stay valid); a RUNNING job keeps its placement and rendezvous
// secret (its attempt credential), so its ranks go on; if a worker of it
// does not come back in time, the attempt fails as WORKER_LOST and the job restarts from its
// latest committed checkpoint (or fails when no restarts are left). Its rendezvous values are
// reloaded too (queued on the state writer at each Set, batched, nobody waits; deleted when the
// attempt ends), so ranks still bootstrapping their communicators, or rebuilding them for a new
// membership epoch, find the keys set before the restart.
//
// Thread safety: every method may be called from any thread. Blocking calls (NextAssignment,
// WaitJob, RendezvousGet) block only their caller, up to the given wait.
#ifndef SHARDLINE_COORDINATOR_CORE_COORDINATOR_CORE_H_
#define SHARDLINE_COORDINATOR_CORE_COORDINATOR_CORE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "coordinator/checkpoints/checkpoint_registry.h"
#include "coordinator/checkpoints/manifest_fetch.h"
#include "coordinator/core/assignment_outbox.h"
#include "coordinator/core/attempt_credentials.h"
#include "coordinator/core/change_feed.h"
#include "coordinator/core/core_options.h"
#include "coordinator/core/job_table.h"
#include "coordinator/core/rank_tracker.h"
#include "coordinator/core/replica_quorum.h"
#include "coordinator/observability/job_logs.h"
#include "coordinator/observability/training_metrics.h"
#include "coordinator/placement/draining_slots.h"
#include "coordinator/placement/planner.h"
#include "coordinator/placement/scheduler.h"
#include "coordinator/placement/user_quota.h"
#include "coordinator/placement/worker_registry.h"
#include "coordinator/rendezvous/rendezvous_rpc.h"
#include "coordinator/rendezvous/rendezvous_store.h"
#include "coordinator/state/state.pb.h"
#include "coordinator/state/state_store.h"
#include "coordinator/state/state_writer.h"
#include "proto/coordinator.pb.h"

namespace shardline::coordinator {

class CoordinatorCore {
 public:
  // Opens the state store (when state_dir is set) and reloads everything in it.
  // Errors: INVALID_ARGUMENT without a clock; the store's errors.
  static absl::StatusOr<std::unique_ptr<CoordinatorCore>> Create(const CoreOptions& options);
  ~CoordinatorCore();

  // ---- workers
  // The response carries the worker's new credential (the previous one stops working).
  // `presented`: the worker credential the caller sent, checked for a live node
  // (WorkerRegistry::Register); the gRPC adapter always passes it.
  absl::StatusOr<RegisterWorkerResponse> RegisterWorker(
      const RegisterWorkerRequest& req, std::optional<absl::string_view> presented = std::nullopt);
  // OK when `credential` is the one `worker_id` got at its latest registration. Errors:
  // NOT_FOUND (unknown worker), PERMISSION_DENIED "worker credential does not match worker <id>".
  absl::Status CheckWorkerCredential(const std::string& worker_id,
                                     absl::string_view credential) const {
    return registry_.CheckCredential(worker_id, credential);
  }
  // Unknown or dead workers get reregister = true (not an error). Rank statuses of the current
  // attempts are applied: exit 0 counts towards success, any other exit fails the attempt.
  absl::StatusOr<HeartbeatResponse> Heartbeat(const HeartbeatRequest& req);
  // Starts a new assignment stream for `worker_id`; returns its generation. It supersedes any
  // older stream of the worker and first re-sends START for every rank placed on the worker that
  // no heartbeat has acknowledged yet (the daemon ignores a START it already runs).
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

  // ---- rendezvous (see rendezvous_rpc.h for the errors)
  absl::Status RendezvousSet(const RendezvousSetRequest& req);
  absl::StatusOr<RendezvousGetResponse> RendezvousGet(const RendezvousGetRequest& req) {
    return ServeRendezvousGet(&rendezvous_, req, options_.max_rendezvous_wait);
  }
  // One non-blocking look (for the event-driven server path): DEADLINE_EXCEEDED while keys are
  // missing, its message naming them and `waited`.
  absl::StatusOr<RendezvousGetResponse> RendezvousPoll(const RendezvousGetRequest& req,
                                                       absl::Duration waited) {
    return ServeRendezvousPoll(&rendezvous_, req, waited);
  }
  // The wait a RendezvousGet request gets: timeout_ms capped by max_rendezvous_wait.
  absl::Duration RendezvousWait(const RendezvousGetRequest& req) const {
    return RendezvousWaitFor(req, options_.max_rendezvous_wait);
  }

  // The running attempt whose credential `credential` is; nullopt when none (unknown, or the
  // attempt ended).
  std::optional<AttemptIdentity> IdentifyAttempt(absl::string_view credential) const {
    return attempt_credentials_.Find(credential);
  }

  // ---- reports from ranks. Errors: NOT_FOUND (job), FAILED_PRECONDITION for a report of an
  // attempt that is not the job's running one, INVALID_ARGUMENT for a rank outside the world
  // (and for a negative progress step or memory figure; see CheckpointRegistry::Report for the
  // checkpoint report's own checks). ReportCheckpoint waits until its record is durable:
  // UNAVAILABLE when the state store cannot be written. An accepted progress report sets
  // `response`'s durable_step when given (training_metrics.h); a report of a step the job has
  // passed, from the attempt that set the job's step, only fills its series (rank_reports.h).
  absl::Status ReportProgress(const ProgressReport& report,
                              ReportProgressResponse* response = nullptr);
  absl::Status ReportCheckpoint(const CheckpointReport& report);

  // fault_tolerance REPLICA_GROUPS, the StepVote RPC in two halves (its waiting is the
  // service's: a callback reactor woken by WaitDirty's `votes`, at most kMaxStepVoteWait).
  // CastStepVote records the rank's vote (or join) and returns the step's decision when there
  // already is one (nullopt: wait). Errors: ReportProgress's (NOT_FOUND, FAILED_PRECONDITION for
  // an attempt not running, INVALID_ARGUMENT for a rank outside the world); FAILED_PRECONDITION
  // for a job without REPLICA_GROUPS and for a vote the quorum refuses (a generation never
  // placed, another step than the one being decided); UNAVAILABLE when the coordinator shuts
  // down. StepVoteAnswer returns a cast vote's decision, LEAVE when the attempt ended (while the
  // vote waited), nullopt while undecided.
  static constexpr absl::Duration kMaxStepVoteWait = absl::Seconds(20);
  absl::StatusOr<std::optional<StepVoteResponse>> CastStepVote(const StepVoteRequest& req);
  std::optional<StepVoteResponse> StepVoteAnswer(const StepVoteRequest& req);
  // DEADLINE_EXCEEDED "no decision yet for step N": no decision within the wait; the voter
  // sends the same vote again.
  static absl::Status NoDecisionYet(const StepVoteRequest& req);

  // ---- logs and training metrics
  // Takes the chunks' lines (job_logs.h) that `req.worker_id` may ship: each chunk is judged
  // alone, and a refused one adds nothing. A chunk of an unknown job (NOT_FOUND), of an attempt
  // the job has not started or of a rank outside its world (INVALID_ARGUMENT), or of a rank
  // that is not placed on the worker in that attempt (PERMISSION_DENIED naming the worker, job,
  // attempt and rank; RankTracker::PlacedOn) is refused; the first such error is returned after
  // the other chunks are taken, so one stale chunk of a real daemon costs none of its other
  // ranks' lines. Lines of the job's last ended attempt are taken (a rank's last lines often
  // arrive after its exit). The caller has checked the worker's credential.
  absl::Status ShipLogs(const ShipLogsRequest& req);
  // Errors: NOT_FOUND for an unknown job; INVALID_ARGUMENT for a negative tail_lines or rank.
  absl::StatusOr<GetLogsResponse> GetLogs(const GetLogsRequest& req) const;
  // The job's training series (training_metrics.h) with its state, per-rank peak memory and
  // ETA. Errors: NOT_FOUND.
  absl::StatusOr<GetJobMetricsResponse> GetJobMetrics(const GetJobMetricsRequest& req) const;
  // The running jobs with their spec name and latest training report (for the Prometheus
  // exposition): `latest` has count 0 before the first report.
  struct RunningJobMetrics {
    std::string job_id;
    std::string name;
    int64_t step = 0;
    int64_t total_steps = 0;
    double eta_s = 0;
    std::vector<int64_t> per_rank_peak_memory_bytes;
    MetricsPoint latest;
  };
  std::vector<RunningJobMetrics> RunningJobs() const;

  // ---- jobs
  // Errors: INVALID_ARGUMENT naming the field; RESOURCE_EXHAUSTED past one of `owner`'s quotas
  // (user_quota.h CheckSubmitQuota; jobs being submitted concurrently count too); UNAVAILABLE when
  // the job cannot be stored or the coordinator is read-only (CheckWritable; nothing is added
  // then). `owner` is recorded as JobStatus.owner.
  absl::StatusOr<std::string> SubmitJob(const JobSpec& spec, const std::string& owner = "");
  // Whose checkpoint a path is, by the registry (#31 item 3: who may continue it). `committed`:
  // the job whose committed checkpoint `path` names (checkpoint.resume_from); otherwise the job
  // whose checkpoint directory holds `path`. Empty fields when none.
  struct CheckpointOwner {
    std::string job_id;
    std::string owner;
  };
  CheckpointOwner OwnerOfCheckpointPath(const std::string& path, bool committed) const;
  absl::StatusOr<JobStatus> GetJob(const std::string& job_id) const;
  // Jobs in any of `states` (empty: all), in submission order.
  std::vector<JobStatus> ListJobs(const std::vector<JobState>& states) const;
  // One page of them (ListJobsRequest: states, page_size, page_token). Errors: INVALID_ARGUMENT
  // naming --max_list_page_size for a page_size above it (or below 0), and for a token this
  // coordinator did not issue.
  // `newest_first`: the dashboard's order (JobTable::Page).
  absl::StatusOr<ListJobsResponse> ListJobsPage(const ListJobsRequest& req,
                                                bool newest_first = false) const;
  // Errors: NOT_FOUND; RESOURCE_EXHAUSTED for a reason over --max_reason_bytes;
  // FAILED_PRECONDITION for a finished job; UNAVAILABLE while read-only
  // (nothing changes) or when the cancel's write fails (it stands in memory and is retried in
  // order; the coordinator is read-only until it is stored).
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

  // What `user`'s jobs hold and the per-user bounds (WhoAmIResponse.usage).
  UserUsage UsageOf(const std::string& user) const;
  // Users' own bounds from the users file (replacing the previous set; the server calls it at
  // start and after each reload). Later submits and scheduling rounds apply them; running jobs
  // are not stopped by a lowered bound.
  void SetUserQuotas(UserQuotaOverrides overrides);

  // ---- checkpoints
  absl::StatusOr<std::vector<CheckpointInfo>> ListCheckpoints(const std::string& job_id) const;
  // Reads <path>/MANIFEST.json when this machine sees the path; otherwise the manifest is empty.
  // A committed step's manifest is read once and then served from a bounded cache
  // (ManifestCache).
  // The read runs on a helper thread (bounded_file_read.h). Errors: NOT_FOUND; FAILED_PRECONDITION
  // when MANIFEST.json is not a regular file (a FIFO there must not block a gRPC thread);
  // DEADLINE_EXCEEDED after file_read_timeout.
  absl::StatusOr<GetCheckpointResponse> GetCheckpoint(const std::string& job_id,
                                                      int64_t step) const;

  // Reaps dead workers (failing their jobs' attempts), schedules what fits and queues the
  // training series due for their batched write. The server calls it periodically; tests call
  // it after moving the fake clock.
  void Tick();
  // Wakes every blocked caller with UNAVAILABLE; later blocking calls return at once.
  void Shutdown();

  // For event-driven streams: waits up to `wait` until some worker's outbox, job or rendezvous
  // namespace changed since the last call, and returns which (each change is reported once, to
  // one caller). Returns false once the core shuts down.
  using Dirty = ChangeFeed::Dirty;
  bool WaitDirty(absl::Duration wait, Dirty* dirty);

  int alive_workers() const { return registry_.alive_count(); }

  // For metrics. Counters count since this process started.
  struct Counters {
    std::map<JobState, int> jobs_by_state;
    int64_t attempts_started = 0;
    int64_t attempts_failed = 0;
    int64_t restarts = 0;
    int64_t preemptions = 0;  // attempts requeued for a higher-priority job
  };
  Counters counters() const;

 private:
  CoordinatorCore(const CoreOptions& options, std::unique_ptr<StateStore> store);
  absl::Status Load();

  // Starts what the scheduler places.
  void ScheduleLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status StartAttemptLocked(JobRecord& job, const Plan& plan)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What the STARTs of the job's current attempt share (rank 0's address, resume step...).
  AttemptStartInfo StartInfoLocked(const JobRecord& job) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Stops the running attempt's ranks, frees its slots and closes its rendezvous namespace.
  // With send_stop, the slot of every rank its live worker has reported is held in draining_
  // (draining_slots.h) instead of freed.
  void EndAttemptLocked(JobRecord& job, bool send_stop) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Grow-back (coordinator_core_elastic.cc): `job` (RUNNING) just committed `step`; when it is
  // elastic, runs below its spec's world and the free slots (and its owner's quota) now hold a
  // larger valid world, its attempt ends (STOP) and it goes back to PENDING (GROWING event) to
  // restart from that checkpoint at the larger world.
  void MaybeGrowLocked(JobRecord& job, int64_t step) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // ---- preemption (coordinator_core_preemption.cc)
  // The RUNNING attempts a higher-priority job may preempt, for the scheduler.
  std::vector<RunningJob> PreemptibleLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Asks `victim`'s ranks to save a checkpoint at their next step and stop (PREEMPTING event,
  // PREEMPT to its workers) for `waiting`; once asked, nothing until it ends.
  void PreemptLocked(JobRecord& victim, const JobRecord& waiting)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `job` committed checkpoint `step`: when it was saved for a preemption (the record's
  // preempt_saved_step), ends the attempt and requeues the job (PREEMPTED).
  void MaybeRequeuePreemptedLocked(JobRecord& job, int64_t step) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Preempted attempts that committed nothing within CoreOptions::preempt_timeout: stopped and
  // requeued anyway.
  void TickPreemptionsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `worker` (on `node`) was declared dead: forgets its draining ranks and notes WORKER_LOST on
  // each of their jobs that is not finished (it may restart smaller without them).
  void NoteDrainingRanksLostLocked(const std::string& worker, const std::string& node)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `restartable` false: the job FAILS with restarts left (JobStateMachine::FailAttempt).
  void FailAttemptLocked(JobRecord& job, const std::string& kind, const std::string& reason,
                         bool restartable = true) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ApplyFailuresLocked(const std::vector<RankFailure>& failures)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Rank `rank` of the job's running attempt exited 0; the job succeeds with its last rank.
  void RankSucceededLocked(JobRecord& job, int32_t rank) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PersistWorker(const std::string& worker_id);

  // ---- replica-group fault tolerance (coordinator_core_ft.cc)
  // A REPLICA_GROUPS job's new (or restored) attempt gets its quorum.
  void StartQuorumLocked(JobRecord& job, bool restored) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The failure goes to the job's quorum (true), unless the job has none or no restart could fix
  // it (false: fail the attempt as usual).
  bool QuorumTakesFailureLocked(JobRecord& job, const RankFailure& f)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Notes the events, stops the lost groups' ranks, persists the membership, fails the attempt
  // when the quorum says so (`kind` / `reason`: the failure that caused it), wakes the voters.
  void ApplyQuorumActionsLocked(JobRecord& job, QuorumActions actions, const std::string& kind,
                                const std::string& reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Places a replacement for every lost group S free slots allow.
  void PlaceReplacementsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The votes whose vote_timeout passed.
  void TickQuorumsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::optional<StepVoteResponse> StepVoteAnswerLocked(const StepVoteRequest& req)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A REPLICA_GROUPS job succeeds when every rank of every live group exited 0.
  void MaybeSucceedReplicaGroupsLocked(JobRecord& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Finished-job retention (CoreOptions::finished_job_ttl, max_finished_jobs).
  void CollectFinishedJobsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The in-memory halves of CancelJob and ReportCheckpoint; the public calls then wait, without
  // mu_, until what they changed is durable (StateWriter::WaitDurable).
  absl::Status CancelJobLocked(const std::string& job_id, const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status ReportCheckpointLocked(const CheckpointReport& report)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static std::string Namespace(const JobRecord& rec);
  // Whether `worker_id` may ship `chunk` (ShipLogs' errors).
  absl::Status CheckLogChunkLocked(const std::string& worker_id, const RankLogChunk& chunk) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `user`'s usage (user_quota.h), jobs still being submitted included.
  UserUsageCount UsageLocked(const std::string& user) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The ranks each user's RUNNING attempts hold, with the bound, for the scheduler.
  RankQuota RankQuotaLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues the writes of the training series that are due (every dirty one when `all`).
  void FlushTrainingMetrics(bool all);
  // JobTable's before-end hook: the ended job's unwritten series, queued before its end.
  void WriteSeriesOfEndedJob(const std::string& job_id);

  const CoreOptions options_;
  UserQuotaOverrides user_quotas_ ABSL_GUARDED_BY(mu_);
  const Clock* clock_;
  std::unique_ptr<StateWriter> writer_;     // owns the store (none: in memory only)
  WorkerRegistry registry_;                 // own lock
  RendezvousStore rendezvous_;              // own lock
  AttemptCredentials attempt_credentials_;  // own lock
  TrainingMetrics training_;                // own lock; taken after mu_ when both are
  // Held while a series is taken and queued (FlushTrainingMetrics, WriteSeriesOfEndedJob);
  // taken after mu_ when both are.
  absl::Mutex series_write_mu_;
  JobLogs logs_;                     // own lock
  mutable ManifestCache manifests_;  // own lock; GetCheckpoint's committed manifests

  mutable absl::Mutex mu_;
  ChangeFeed feed_ ABSL_GUARDED_BY(mu_);
  JobTable jobs_ ABSL_GUARDED_BY(mu_);            // stores to store_, reports to feed_
  AssignmentOutbox outbox_ ABSL_GUARDED_BY(mu_);  // reports to feed_
  RankTracker tracker_ ABSL_GUARDED_BY(mu_);
  CheckpointRegistry checkpoints_ ABSL_GUARDED_BY(mu_);
  Counters counters_ ABSL_GUARDED_BY(mu_);       // jobs_by_state filled on read
  DrainingSlots draining_ ABSL_GUARDED_BY(mu_);  // stopped ranks still holding their slot
  std::map<std::string, ReplicaQuorum> quorums_ ABSL_GUARDED_BY(mu_);  // by job id
  // Jobs past their quota check but not added yet (stored off the mutex), by owner: counted so
  // that concurrent submits cannot all pass the same check.
  std::map<std::string, UserUsageCount> submitting_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shardline::coordinator

#endif  // SHARDLINE_COORDINATOR_CORE_COORDINATOR_CORE_H_
