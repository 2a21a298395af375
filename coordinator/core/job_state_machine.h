// JobStateMachine: the legal life of a job, applied to its JobRecord.
//
//   PENDING --schedule--> RUNNING --all ranks exit 0--> SUCCEEDED
//      |                    |  \--attempt fails, restarts left--> PENDING (attempt kept, backoff)
//      |                    |  \--attempt fails, none left------> FAILED
//      |                    |  \--attempt fails, not restartable-> FAILED (restarts left or not)
//      |                    |  \--elastic job grows back--------> PENDING (no restart counted)
//      |                    |  \--preempted, checkpoint saved---> PENDING (no restart counted)
//      +--cancel / fail--> CANCELLED / FAILED <--cancel--+
//
// Terminal states (SUCCEEDED, FAILED, CANCELLED) never change again. Every transition appends a
// JobEvent (time, attempt, kind, reason) to the record; an illegal one returns
// FAILED_PRECONDITION ("job J: illegal transition RUNNING -> PENDING") and changes nothing.
//
// Thread safety: none; the caller serializes access to the record.
#ifndef SHARDLINE_COORDINATOR_CORE_JOB_STATE_MACHINE_H_
#define SHARDLINE_COORDINATOR_CORE_JOB_STATE_MACHINE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "coordinator/state/state.pb.h"

namespace shardline::coordinator {

bool IsTerminal(JobState state);
bool IsLegalTransition(JobState from, JobState to);

class JobStateMachine {
 public:
  // `record` must outlive this object.
  JobStateMachine(JobRecord* record, absl::Time now) : rec_(record), now_(now) {}

  // New job: state PENDING, event SUBMITTED. Only on a record with no state yet.
  absl::Status Submit();

  // PENDING -> RUNNING: attempt + 1, world size of the new attempt, event SCHEDULED.
  absl::Status Start(int32_t world_size, absl::string_view reason);

  // RUNNING -> SUCCEEDED, event SUCCEEDED.
  absl::Status Succeed(absl::string_view reason);

  // The current attempt failed (`kind` e.g. RANK_FAILED, WORKER_LOST). RUNNING -> PENDING with
  // a RESTARTING event when restarts are left (restart.max_restarts; the next attempt waits
  // restart.backoff_s), else RUNNING -> FAILED. Not `restartable` (a failure a new attempt would
  // meet again, e.g. CHECKPOINT_DIR_NOT_SHARED): RUNNING -> FAILED whatever restarts are left.
  // Returns true when the job will restart.
  absl::StatusOr<bool> FailAttempt(absl::string_view kind, absl::string_view reason,
                                   bool restartable = true);

  // RUNNING -> PENDING without a restart counted and without backoff, event `kind` with
  // `reason`: GROWING for an elastic job that runs below its spec's world and can grow back
  // (coordinator_core_elastic.cc), PREEMPTED for a job whose slots a higher-priority job takes
  // (coordinator_core_preemption.cc). Clears the record's preemption fields.
  absl::Status Requeue(absl::string_view kind, absl::string_view reason);

  // PENDING or RUNNING -> FAILED (e.g. a job that can never be placed), event FAILED.
  absl::Status Fail(absl::string_view reason);

  // PENDING or RUNNING -> CANCELLED, event CANCELLED.
  absl::Status Cancel(absl::string_view reason);

  // Appends an event without a state change (e.g. CHECKPOINT_COMMITTED).
  void Note(absl::string_view kind, absl::string_view message);

 private:
  absl::Status Move(JobState to, absl::string_view kind, absl::string_view reason);

  JobRecord* rec_;
  absl::Time now_;
};

}  // namespace shardline::coordinator

#endif  // SHARDLINE_COORDINATOR_CORE_JOB_STATE_MACHINE_H_
