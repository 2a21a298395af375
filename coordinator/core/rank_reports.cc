#include "coordinator/core/rank_reports.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "coordinator/core/job_state_machine.h"
#include "fsdp/layout.h"

namespace shardline::coordinator {

absl::Status CheckReportSource(const JobStatus& st, int32_t attempt, int32_t rank) {
  if (st.state() != RUNNING || attempt != st.attempt()) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", st.job_id(), " attempt ", attempt, " is not running (job is ",
                     JobState_Name(st.state()), " at attempt ", st.attempt(), ")"));
  }
  if (rank < 0 || rank >= st.world_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank: ", rank, " outside world of ", st.world_size()));
  }
  return absl::OkStatus();
}

int32_t ProgressLeader(const JobStatus& st, int32_t shard_degree) {
  if (st.live_replica_groups_size() == 0) return 0;
  // The stored groups come from the quorum, within the layout; a record where they are not
  // falls back to rank 0.
  absl::StatusOr<fsdp::ParallelLayout> layout =
      fsdp::ParallelLayout::ForShape(st.world_size(), std::max(1, shard_degree));
  if (!layout.ok()) return 0;
  absl::StatusOr<fsdp::LiveGroups> live = fsdp::LiveGroups::Create(
      *layout, {st.live_replica_groups().begin(), st.live_replica_groups().end()});
  if (!live.ok()) return 0;
  return live->LeaderRank();
}

namespace {

// With replica groups every group's first rank logs the same committed steps with the same loss
// (the vote's): one of them that is ahead of the job's progress carries a step the leader's
// reports have not brought (see ApplyProgress).
bool AheadOfTheLeader(const ProgressReport& r, const JobStatus& st, int32_t shard_degree) {
  if (shard_degree <= 0 || st.live_replica_groups_size() == 0 || r.step() <= st.step()) {
    return false;
  }
  absl::StatusOr<fsdp::ParallelLayout> layout =
      fsdp::ParallelLayout::ForShape(st.world_size(), shard_degree);
  return layout.ok() && r.rank() >= 0 && r.rank() < layout->world_size() &&
         layout->ShardIndex(r.rank()) == 0;
}

}  // namespace

absl::StatusOr<ProgressChange> ApplyProgress(const ProgressReport& r, int32_t leader_rank,
                                             JobStatus* st, int32_t shard_degree) {
  if (r.step() < 0 || r.peak_memory_bytes() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("progress report: step and peak_memory_bytes must be >= 0, got step ",
                     r.step(), ", peak_memory_bytes ", r.peak_memory_bytes()));
  }
  if (st->per_rank_peak_memory_bytes_size() != st->world_size()) {
    st->mutable_per_rank_peak_memory_bytes()->Resize(st->world_size(), 0);
  }
  const bool memory_grew = r.peak_memory_bytes() > st->per_rank_peak_memory_bytes(r.rank());
  if (memory_grew) st->set_per_rank_peak_memory_bytes(r.rank(), r.peak_memory_bytes());
  if (r.rank() != leader_rank && !AheadOfTheLeader(r, *st, shard_degree)) {
    return memory_grew ? ProgressChange::kPeakMemory : ProgressChange::kNone;
  }
  if (r.attempt() <= st->step_attempt() && r.step() <= st->step()) {
    if (r.attempt() == st->step_attempt() && r.step() == st->step() && !r.sample().empty() &&
        r.sample() != st->sample()) {
      st->set_sample(r.sample());
      return ProgressChange::kSample;
    }
    return ProgressChange::kBackfill;
  }
  st->set_step_attempt(r.attempt());
  st->set_step(r.step());
  st->set_loss(r.loss());
  st->set_tokens_per_s(r.tokens_per_s());
  const int64_t left = std::max<int64_t>(0, st->total_steps() - r.step());
  st->set_eta_s(r.step_time_s() * static_cast<double>(left));
  if (!std::isnan(r.val_loss()) && r.val_loss() != 0) st->set_val_loss(r.val_loss());
  if (!r.sample().empty()) st->set_sample(r.sample());
  return ProgressChange::kProgress;
}

absl::StatusOr<CheckpointChange> ApplyCheckpointReport(const CheckpointReport& r, JobRecord* job,
                                                       CheckpointRegistry* registry, absl::Time now,
                                                       int32_t max_records) {
  JobStatus& st = *job->mutable_status();
  const CheckpointRegistry::Layout layout{
      st.world_size(), FsdpSpec::ShardingStrategy_Name(st.spec().fsdp().sharding_strategy()),
      job->shard_degree()};
  CheckpointChange change;
  ASSIGN_OR_RETURN(change.record, registry->Report(r, layout, now, &change.committed));
  if (change.committed) {
    st.set_latest_checkpoint_step(std::max(st.latest_checkpoint_step(), r.step()));
    JobStateMachine(job, now).Note(
        "CHECKPOINT_COMMITTED", absl::StrCat("step ", r.step(), " at ", change.record.info().path(),
                                             " (", change.record.files_size(), " data files)"));
    change.retired = registry->ApplyRetention(r.job_id(), st.spec().checkpoint().keep_last(),
                                              r.step(), max_records);
  }
  for (auto& key : registry->BoundRecords(r.job_id(), r.step(), max_records)) {
    change.retired.push_back(std::move(key));
  }
  return change;
}

}  // namespace shardline::coordinator
