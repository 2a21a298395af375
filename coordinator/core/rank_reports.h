// Reports from ranks (progress, checkpoint shards): which ones a job accepts, and what a report
// does to the job: a progress report to its status, a checkpoint report to its checkpoint records
// (checkpoint_registry.h decides when a step is committed) and, once a step commits, to its latest
// step, events and retention. The caller stores what changed.
//
// Thread safety: functions on the caller's objects; the coordinator calls them under its lock.
#ifndef SHARDLINE_COORDINATOR_CORE_RANK_REPORTS_H_
#define SHARDLINE_COORDINATOR_CORE_RANK_REPORTS_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "coordinator/checkpoints/checkpoint_registry.h"
#include "coordinator/state/state.pb.h"
#include "proto/coordinator.pb.h"

namespace shardline::coordinator {

// Whether a report of (`attempt`, `rank`) may change the job `status`: only ranks of its
// RUNNING attempt report. Errors: FAILED_PRECONDITION naming the job's state and attempt when
// `attempt` is not the running one; INVALID_ARGUMENT for a rank outside the world.
absl::Status CheckReportSource(const JobStatus& status, int32_t attempt, int32_t rank);

// What a progress report changed.
enum class ProgressChange {
  kNone,        // nothing a watcher sees
  kPeakMemory,  // only the rank's peak memory grew (not persisted: other ranks report often)
  kProgress,    // the leader's step, loss, throughput, ETA... (persisted)
  kBackfill,    // a step the job has passed, of the attempt that set its step: a series point
                // if the series lacks it (a report sent again); the status does not move back
  kSample,      // as kBackfill, and it brought the job's step's sample, which the status lacked
                // (another group's first rank carried the step first; only the leader samples):
                // persisted
};

// The rank whose reports are the job's progress: rank 0, or in a job with replica-group fault
// tolerance the first rank of the lowest live group (the rank that logs and samples once group
// 0 is lost). `shard_degree`: the job's S.
int32_t ProgressLeader(const JobStatus& status, int32_t shard_degree);

// Applies a progress report from an accepted source (CheckReportSource) to `status`: every rank
// raises its peak memory figure; the leader (`leader_rank`, ProgressLeader) also sets step, loss,
// tokens/s, ETA, and val_loss and sample when it has them. With replica-group fault tolerance
// (`shard_degree` > 0 and live groups in `status`) so does the first rank of any group, live or
// lost, reporting a step beyond the job's: every group logs the same committed steps with the
// same loss, and the leader's own reports may come late (its worker daemon frozen: the chaos
// soak, #30, found the steps trained meanwhile missing from the job's series for good, since
// they reached the coordinator after group 0 was lost and rank 2 led). The leader's report of a
// step at or below the job's, from the attempt that set the job's step (`step_attempt`), changes
// no status field: it is kBackfill (a report sent again after a coordinator restart, whose job
// step may be restored ahead of its series, or one rank 2 already carried); a later attempt's
// report sets the step, also backwards (it resumed from an older checkpoint). Errors:
// INVALID_ARGUMENT for a negative step or memory figure (then nothing changes).
absl::StatusOr<ProgressChange> ApplyProgress(const ProgressReport& report, int32_t leader_rank,
                                             JobStatus* status, int32_t shard_degree = 0);

// What a checkpoint report changed, for the caller to store.
struct CheckpointChange {
  CheckpointRecord record;  // the step's record after the report
  bool committed = false;   // this report committed the step: the job record changed too
  std::vector<std::pair<std::string, int64_t>> retired;  // (job, step) records retention dropped
};

// Applies a checkpoint report from an accepted source (CheckReportSource) of `job` to `registry`.
// When it commits the step: the job's latest_checkpoint_step rises, a CHECKPOINT_COMMITTED event
// is noted, and the registry keeps only the spec's checkpoint.keep_last newest committed steps
// (at most `max_records`, --max_checkpoints_per_job) and drops uncommitted steps the commit
// overtook (CheckpointRegistry::ApplyRetention). After any report the job holds at most
// `max_records` records (BoundRecords; <= 0: no bound).
// Errors: CheckpointRegistry::Report's (then nothing changes).
absl::StatusOr<CheckpointChange> ApplyCheckpointReport(const CheckpointReport& report,
                                                       JobRecord* job, CheckpointRegistry* registry,
                                                       absl::Time now, int32_t max_records = 0);

}  // namespace shardline::coordinator

#endif  // SHARDLINE_COORDINATOR_CORE_RANK_REPORTS_H_
