#include "coordinator/observability/training_metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace shardline::coordinator {

MetricsPoint MetricsPointFromReport(const ProgressReport& r, const JobStatus& status,
                                    absl::Time now) {
  MetricsPoint p;
  p.set_step(r.step());
  p.set_attempt(r.attempt());
  p.set_time_unix_ms(absl::ToUnixMillis(now));
  p.set_loss(r.loss());
  // As ApplyProgress: 0 and NaN both mean "did not evaluate".
  p.set_val_loss(std::isnan(r.val_loss()) || r.val_loss() == 0
                     ? std::numeric_limits<double>::quiet_NaN()
                     : r.val_loss());
  p.set_lr(r.lr());
  p.set_grad_norm(r.grad_norm());
  p.set_tokens_per_s(r.tokens_per_s());
  p.set_mfu(r.mfu());
  p.set_step_time_s(r.step_time_s());
  int64_t peak = 0;
  for (int64_t b : status.per_rank_peak_memory_bytes()) peak = std::max(peak, b);
  p.set_peak_memory_bytes(peak);
  return p;
}

bool TrainingMetrics::Add(const std::string& job_id, const MetricsPoint& point) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) it = jobs_.emplace(job_id, Job{TrainingSeries(capacity_)}).first;
  Job& job = it->second;
  if (!job.series.Add(point)) return false;
  job.dirty = true;
  // A point at or below what is (or is about to be) durable: the stored record lacks it.
  const int64_t below = point.step() - 1;
  job.durable_step = std::min(job.durable_step, below);
  for (Write& w : job.writes) w.step = std::min(w.step, below);
  return true;
}

void TrainingMetrics::Restore(const JobMetricsRecord& record) {
  absl::MutexLock lock(&mu_);
  // Its first change after the restart is written at once (as a new series'), whatever clock
  // the core runs on.
  Job job{TrainingSeries::FromRecord(record, capacity_), false, absl::InfinitePast()};
  job.durable_step = job.series.latest().step();
  jobs_.insert_or_assign(record.job_id(), std::move(job));
}

GetJobMetricsResponse TrainingMetrics::Get(const std::string& job_id, int64_t after_step) const {
  GetJobMetricsResponse r;
  r.set_job_id(job_id);
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return r;
  const TrainingSeries& s = it->second.series;
  for (MetricsPoint& p : s.Points()) {
    if (p.step() > after_step) *r.add_points() = std::move(p);
  }
  if (s.latest().count() > 0) *r.mutable_latest() = s.latest();
  r.set_reported_steps(s.reported_steps());
  r.set_stride(s.stride());
  return r;
}

std::map<std::string, MetricsPoint> TrainingMetrics::Latest(
    const std::vector<std::string>& job_ids) const {
  std::map<std::string, MetricsPoint> out;
  absl::MutexLock lock(&mu_);
  for (const std::string& id : job_ids) {
    auto it = jobs_.find(id);
    if (it != jobs_.end() && it->second.series.latest().count() > 0) {
      out[id] = it->second.series.latest();
    }
  }
  return out;
}

std::vector<JobMetricsRecord> TrainingMetrics::TakeDirty(absl::Time now, absl::Duration interval,
                                                         bool all) {
  std::vector<JobMetricsRecord> out;
  absl::MutexLock lock(&mu_);
  for (auto& [id, job] : jobs_) {
    if (!job.dirty) continue;
    if (!all && !job.ended && now - job.written < interval) continue;
    out.push_back(job.series.ToRecord(id));
    job.dirty = false;
    job.written = now;
    job.writes.push_back({0, job.series.latest().step()});
  }
  return out;
}

std::optional<JobMetricsRecord> TrainingMetrics::TakeDirtyJob(const std::string& job_id,
                                                              absl::Time now) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end() || !it->second.dirty) return std::nullopt;
  Job& job = it->second;
  job.dirty = false;
  job.written = now;
  job.writes.push_back({0, job.series.latest().step()});
  return job.series.ToRecord(job_id);
}

void TrainingMetrics::Ended(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it != jobs_.end()) it->second.ended = true;
}

void TrainingMetrics::Queued(const std::string& job_id, int64_t ticket) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return;
  for (Write& w : it->second.writes) {
    if (w.ticket == 0) {
      w.ticket = ticket;
      return;
    }
  }
}

int64_t TrainingMetrics::DurableStep(const std::string& job_id, int64_t durable_ticket) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return 0;
  Job& job = it->second;
  size_t done = 0;
  while (done < job.writes.size() && job.writes[done].ticket != 0 &&
         job.writes[done].ticket <= durable_ticket) {
    job.durable_step = job.writes[done].step;  // the newest durable record is what is on disk
    ++done;
  }
  job.writes.erase(job.writes.begin(), job.writes.begin() + static_cast<long>(done));
  return std::max<int64_t>(0, job.durable_step);
}

void TrainingMetrics::Forget(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  jobs_.erase(job_id);
}

}  // namespace shardline::coordinator
