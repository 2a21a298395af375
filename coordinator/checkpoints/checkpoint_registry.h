// CheckpointRegistry: checkpoint steps of every job, built from the ranks' shard reports.
//
// A step is committed only when every data file the step has (expected_files) has been reported
// and a report says the manifest was renamed into place (manifest_committed). Reports may arrive
// in any order and may repeat. Retention keeps the newest K committed steps of a job and forgets
// older ones (the files on disk belong to the trainers' shared storage; the registry only stops
// listing them).
//
// Thread safety: none; the coordinator serializes calls under its own lock.
#ifndef SHARDLINE_COORDINATOR_CHECKPOINTS_CHECKPOINT_REGISTRY_H_
#define SHARDLINE_COORDINATOR_CHECKPOINTS_CHECKPOINT_REGISTRY_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "coordinator/state/state.pb.h"
#include "proto/coordinator.pb.h"

namespace shardline::coordinator {

class CheckpointRegistry {
 public:
  // Layout of the attempt that wrote the step, recorded in CheckpointInfo.
  struct Layout {
    int32_t world_size = 0;
    std::string sharding_strategy;
    int32_t shard_degree = 0;
  };

  // Applies one report. Returns the step's record after it (check record.info().committed();
  // `*newly_committed` says whether this report committed it).
  // Errors: INVALID_ARGUMENT for a step < 0, an empty or relative path, a file that is not a
  // plain name in the step directory ("", ".", "..", or holding '/'), expected_files < 0, or a
  // path that differs from the step's earlier reports; FAILED_PRECONDITION for a report on an
  // already committed step that names files it does not have.
  absl::StatusOr<CheckpointRecord> Report(const CheckpointReport& report, const Layout& layout,
                                          absl::Time now, bool* newly_committed);

  // Every step of `job_id` (committed or not), oldest first.
  std::vector<CheckpointInfo> List(absl::string_view job_id) const;
  // Errors: NOT_FOUND naming the job and step.
  absl::StatusOr<CheckpointInfo> Get(absl::string_view job_id, int64_t step) const;
  // Newest committed step of `job_id`, 0 when none.
  int64_t LatestCommitted(absl::string_view job_id) const;
  // The job whose committed checkpoint `path` names (checkpoint.resume_from): a committed
  // record's step directory, or a job's checkpoint directory (the folder of its records) that
  // holds a committed one. Paths compare after lexical normalization. "" when none does.
  std::string JobOfCommittedCheckpoint(absl::string_view path) const;
  // The job whose checkpoint directory holds `path` (checkpoint.init_from_safetensors may be a
  // file exported into it); "" when none.
  std::string JobWhoseDirectoryHolds(absl::string_view path) const;
  // The step the current attempt of `status`'s job resumes from: its newest committed step; for
  // a first attempt with none committed, the spec's checkpoint.resume_step when > 0 (-1, the
  // latest, the trainer resolves itself). 0: start fresh.
  int64_t ResumeStep(const JobStatus& status) const;

  // Retention after `committed_step` of `job_id` committed: forgets committed steps beyond the
  // newest `keep`, where keep is `keep_last` capped by `max_records` (keep_last 0: max_records;
  // both <= 0: all), and uncommitted steps older than the oldest kept one or than
  // `committed_step` (a save that a later step's commit overtook never completes). Uncommitted
  // steps between an older committed_step and the newest committed one (a resume that fell back
  // to an older checkpoint and saves again) stay. Returns the (job, step) pairs removed.
  std::vector<std::pair<std::string, int64_t>> ApplyRetention(absl::string_view job_id,
                                                              int32_t keep_last,
                                                              int64_t committed_step = 0,
                                                              int32_t max_records = 0);
  // Holds `job_id` to at most `max_records` records (<= 0: no bound) after a report of `step`, so
  // a trainer that reports steps it never commits cannot grow the registry: the oldest
  // uncommitted steps other than `step` go first, then the oldest committed ones; `step` and the
  // newest committed step are never removed. Returns the (job, step) pairs removed.
  std::vector<std::pair<std::string, int64_t>> BoundRecords(absl::string_view job_id, int64_t step,
                                                            int32_t max_records);

  // Re-creates a record from storage.
  void Restore(const CheckpointRecord& record);
  // A collected (finished) job: forgets its records (the store's rows go with the job's).
  void ForgetJob(const std::string& job_id);

 private:
  using Key = std::pair<std::string, int64_t>;
  std::map<Key, CheckpointRecord> records_;
};

}  // namespace shardline::coordinator

#endif  // SHARDLINE_COORDINATOR_CHECKPOINTS_CHECKPOINT_REGISTRY_H_
