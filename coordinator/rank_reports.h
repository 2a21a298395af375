// Reports from ranks (progress, checkpoint shards): which ones a job accepts, and what a progress
// report does to the job's status. The checkpoint side of a report is checkpoint_registry.h's.
//
// Thread safety: pure functions on the caller's status.
#ifndef SHARDLINE_COORDINATOR_RANK_REPORTS_H_
#define SHARDLINE_COORDINATOR_RANK_REPORTS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
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
  kProgress,    // rank 0's step, loss, throughput, ETA... (persisted)
};

// Applies a progress report from an accepted source (CheckReportSource) to `status`: every rank
// raises its peak memory figure; rank 0 also sets step, loss, tokens/s, ETA, and val_loss and
// sample when it has them. Errors: INVALID_ARGUMENT for a negative step or memory figure (then
// nothing changes).
absl::StatusOr<ProgressChange> ApplyProgress(const ProgressReport& report, JobStatus* status);

}  // namespace shardline::coordinator

#endif  // SHARDLINE_COORDINATOR_RANK_REPORTS_H_
