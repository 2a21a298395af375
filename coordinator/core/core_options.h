// CoreOptions: what a CoordinatorCore is configured with (the binary's flags, coordinator_main.cc),
// and the one check of them (ValidateCoreOptions, run by CoordinatorCore::Create).
#ifndef SHARDLINE_COORDINATOR_CORE_CORE_OPTIONS_H_
#define SHARDLINE_COORDINATOR_CORE_CORE_OPTIONS_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "coordinator/observability/job_logs.h"
#include "coordinator/observability/training_series.h"
#include "coordinator/placement/user_quota.h"
#include "coordinator/rendezvous/rendezvous_store.h"
#include "proto/job_spec.pb.h"

namespace shardline::coordinator {

struct CoreOptions {
  // Required; must outlive the core.
  const Clock* clock = nullptr;
  // Directory of the SQLite database; empty keeps state in memory only (tests).
  std::string state_dir;
  absl::Duration heartbeat_interval = absl::Seconds(2);
  absl::Duration heartbeat_timeout = absl::Seconds(10);
  // A gap between ticks longer than this is the coordinator's own blindness (stopped, paused,
  // starved): no worker is declared dead for it (WorkerRegistry). Off by default (tests with a
  // fake clock advance it in leaps); the server sets heartbeat_timeout / 2.
  absl::Duration blind_gap = absl::InfiniteDuration();
  // A rank its worker has not listed in a heartbeat this long after the attempt started fails
  // the attempt (RANK_START_TIMEOUT): its START was never received or acted on.
  absl::Duration rank_start_timeout = absl::Minutes(2);
  // Seconds between SIGTERM and SIGKILL that STOP assignments carry.
  int32_t stop_grace_period_s = 10;
  // Longest wait a RendezvousGet may ask for (longer requests are capped; clients loop).
  absl::Duration max_rendezvous_wait = absl::Seconds(60);
  // How often a failed state write is retried (the coordinator is read-only meanwhile).
  absl::Duration state_retry_interval = absl::Seconds(1);
  // Longest a GetCheckpoint waits for its MANIFEST.json read (a hung mount, a huge file).
  absl::Duration file_read_timeout = absl::Seconds(5);
  // A job's training series is written to the state store at most this often (and at a clean
  // shutdown); a SIGKILL loses at most this much of it.
  absl::Duration metrics_flush_interval = absl::Seconds(5);
  // Points a training series keeps before merging pairs (training_series.h).
  int metrics_series_capacity = TrainingSeries::kDefaultCapacity;
  // Bounds of the ranks' log lines kept in memory (job_logs.h).
  JobLogs::Options logs;
  // Bounds on what clients can make the core hold (docs/security.md, "Resource bounds").
  RendezvousStore::Limits rendezvous_limits;
  int max_events_per_job = 1000;  // newest kept per job; the rest counted as events_dropped
  int max_list_page_size = 1000;  // largest ListJobs page_size (the default is 100, or this)
  // Finished-job retention, applied every tick: a finished job is forgotten (memory, state
  // store, its checkpoint records) `finished_job_ttl` after it finished (<= 0: kept), and the
  // oldest finished ones beyond `max_finished_jobs` (<= 0: no count bound) at once.
  absl::Duration finished_job_ttl = absl::Hours(24 * 7);
  int max_finished_jobs = 1000;
  // Checkpoint records one job keeps (the oldest committed beyond it go first; never the newest
  // committed one): CheckpointRegistry::ApplyRetention and BoundRecords. At least 2.
  int max_checkpoints_per_job = 100;
  // SubmitJob refuses a job that could never be placed (placement/placeable.h): 0 bounds it by
  // the alive workers' slots, N > 0 by N ranks, -1 (the default here: tests of the core submit
  // before they register workers) not at all. The server's default is 0.
  int max_world_size = -1;
  // A preempted attempt (coordinator_core_preemption.cc) that commits no checkpoint this long
  // after it was asked is stopped anyway and resumes from its last committed checkpoint.
  absl::Duration preempt_timeout = absl::Minutes(5);
  // Per-user bounds (user_quota.h): pending jobs, running ranks, spec bytes, reason bytes.
  UserQuotas quotas;
  // Full job spec validation (spec::Validate); the core always applies
  // spec::ValidateForScheduling itself first. Null: only those checks.
  std::function<absl::Status(const JobSpec&)> validate_spec;
};

// OK, or INVALID_ARGUMENT: no clock; a heartbeat timeout not above the interval; a bound below 1,
// or --max_checkpoints_per_job below 2 (naming the flags).
absl::Status ValidateCoreOptions(const CoreOptions& options);

}  // namespace shardline::coordinator

#endif  // SHARDLINE_COORDINATOR_CORE_CORE_OPTIONS_H_
