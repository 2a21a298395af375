// CoordinatorCore's observability calls: rank logs shipped by workers and read by users
// (job_logs.h keeps them), and the training series and gauges (training_metrics.h keeps them,
// written to the state store in batches). The class and its lock are coordinator_core.h's.
#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "coordinator/core/coordinator_core.h"
#include "coordinator/core/job_state_machine.h"

namespace shardline::coordinator {

void CoordinatorCore::FlushTrainingMetrics(bool all) {
  // One flush at a time, and none beside an ended job's write: two takes of one series queued
  // in the other order would store the older one last.
  absl::MutexLock lock(&series_write_mu_);
  for (const JobMetricsRecord& r :
       training_.TakeDirty(clock_->Now(), options_.metrics_flush_interval, all)) {
    training_.Queued(r.job_id(), writer_->PutJobMetrics(r));
  }
}

void CoordinatorCore::WriteSeriesOfEndedJob(const std::string& job_id) {
  absl::MutexLock lock(&series_write_mu_);
  if (std::optional<JobMetricsRecord> r = training_.TakeDirtyJob(job_id, clock_->Now())) {
    training_.Queued(job_id, writer_->PutJobMetrics(*r));
  }
}

absl::Status CoordinatorCore::CheckLogChunkLocked(const std::string& worker_id,
                                                  const RankLogChunk& c) const {
  ASSIGN_OR_RETURN(const JobRecord* job, jobs_.Find(c.job_id()));
  const JobStatus& st = job->status();
  const int32_t world = std::max(st.world_size(), st.spec().world_size());
  if (c.attempt() < 1 || c.attempt() > st.attempt()) {
    return absl::InvalidArgumentError(
        absl::StrCat("logs of job ", c.job_id(), ": attempt ", c.attempt(),
                     " has not started (the job is at attempt ", st.attempt(), ")"));
  }
  if (c.rank() < 0 || c.rank() >= world) {
    return absl::InvalidArgumentError(
        absl::StrCat("logs of job ", c.job_id(), ": rank ", c.rank(), " outside world of ", world));
  }
  // A worker credential speaks for its own ranks only, as in Heartbeat: another worker's lines
  // would let it write into any user's logs what that user's trainer never printed.
  if (!tracker_.PlacedOn(c.job_id(), c.attempt(), c.rank(), worker_id)) {
    return absl::PermissionDeniedError(
        absl::StrCat("worker ", worker_id, " may not ship logs of job ", c.job_id(), " attempt ",
                     c.attempt(), " rank ", c.rank(),
                     ": that rank is not placed on it (in the running attempt or the last "
                     "one that ended)"));
  }
  return absl::OkStatus();
}

absl::Status CoordinatorCore::ShipLogs(const ShipLogsRequest& req) {
  absl::Status first_error;
  absl::MutexLock lock(&mu_);
  for (const RankLogChunk& c : req.chunks()) {
    absl::Status s = CheckLogChunkLocked(req.worker_id(), c);
    if (!s.ok()) {
      if (first_error.ok()) first_error = std::move(s);
      continue;
    }
    // Under mu_ (logs_ has its own, inner lock): appended after the lock is released, a chunk of
    // a job collected in between would make an entry for a job the core no longer knows, which
    // nothing would ever forget.
    logs_.Append(c);
  }
  return first_error;
}

absl::StatusOr<GetLogsResponse> CoordinatorCore::GetLogs(const GetLogsRequest& req) const {
  if (req.tail_lines() < 0 || req.rank() < -1) {
    return absl::InvalidArgumentError(
        absl::StrCat("logs: tail_lines and rank must not be negative, got tail_lines ",
                     req.tail_lines(), ", rank ", req.rank()));
  }
  bool finished = false;
  {
    absl::MutexLock lock(&mu_);
    ASSIGN_OR_RETURN(const JobRecord* job, jobs_.Find(req.job_id()));
    const JobStatus& st = job->status();
    finished = IsTerminal(st.state());
    // A rank the job never had would just answer nothing, which reads as "no output yet".
    const int32_t world = std::max(st.world_size(), st.spec().world_size());
    if (!req.all_ranks() && req.rank() >= world) {
      return absl::InvalidArgumentError(absl::StrCat("logs: job ", req.job_id(), " has no rank ",
                                                     req.rank(), " (ranks 0..", world - 1, ")"));
    }
  }
  GetLogsRequest r = req;
  if (r.rank() == -1) r.set_all_ranks(true);
  GetLogsResponse resp = logs_.Get(r);
  resp.set_job_finished(finished);
  return resp;
}

absl::StatusOr<GetJobMetricsResponse> CoordinatorCore::GetJobMetrics(
    const GetJobMetricsRequest& req) const {
  JobStatus st;
  {
    absl::MutexLock lock(&mu_);
    ASSIGN_OR_RETURN(const JobRecord* job, jobs_.Find(req.job_id()));
    st = job->status();
  }
  GetJobMetricsResponse resp = training_.Get(req.job_id(), req.after_step());
  resp.set_state(st.state());
  resp.set_total_steps(st.total_steps() > 0 ? st.total_steps() : st.spec().train().steps());
  resp.set_eta_s(st.eta_s());
  *resp.mutable_per_rank_peak_memory_bytes() = st.per_rank_peak_memory_bytes();
  return resp;
}

std::vector<CoordinatorCore::RunningJobMetrics> CoordinatorCore::RunningJobs() const {
  std::vector<RunningJobMetrics> out;
  std::vector<std::string> ids;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, job] : jobs_.records()) {
      const JobStatus& st = job.status();
      if (st.state() != RUNNING) continue;
      RunningJobMetrics m;
      m.job_id = id;
      m.name = st.spec().name();
      m.step = st.step();
      m.total_steps = st.total_steps();
      m.eta_s = st.eta_s();
      m.per_rank_peak_memory_bytes.assign(st.per_rank_peak_memory_bytes().begin(),
                                          st.per_rank_peak_memory_bytes().end());
      out.push_back(std::move(m));
      ids.push_back(id);
    }
  }
  const std::map<std::string, MetricsPoint> latest = training_.Latest(ids);
  for (RunningJobMetrics& m : out) {
    if (auto it = latest.find(m.job_id); it != latest.end()) m.latest = it->second;
  }
  return out;
}

}  // namespace shardline::coordinator
