#include "coordinator/observability/training_series.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace shardline::coordinator {
namespace {

double Mean(double a, int64_t na, double b, int64_t nb) {
  return (a * static_cast<double>(na) + b * static_cast<double>(nb)) / static_cast<double>(na + nb);
}

}  // namespace

TrainingSeries::TrainingSeries(int capacity) : capacity_(std::max(2, capacity + capacity % 2)) {}

MetricsPoint TrainingSeries::Merge(const MetricsPoint& a, const MetricsPoint& b) {
  MetricsPoint m = b;  // last step, time and attempt are b's
  const int64_t na = a.count(), nb = b.count();
  m.set_first_step(a.first_step());
  m.set_count(na + nb);
  m.set_loss(Mean(a.loss(), na, b.loss(), nb));
  m.set_lr(Mean(a.lr(), na, b.lr(), nb));
  m.set_grad_norm(Mean(a.grad_norm(), na, b.grad_norm(), nb));
  m.set_tokens_per_s(Mean(a.tokens_per_s(), na, b.tokens_per_s(), nb));
  m.set_mfu(Mean(a.mfu(), na, b.mfu(), nb));
  m.set_step_time_s(Mean(a.step_time_s(), na, b.step_time_s(), nb));
  m.set_peak_memory_bytes(std::max(a.peak_memory_bytes(), b.peak_memory_bytes()));
  const int64_t va = a.val_count(), vb = b.val_count();
  m.set_val_count(va + vb);
  if (va + vb == 0) {
    m.set_val_loss(std::numeric_limits<double>::quiet_NaN());
  } else if (va == 0) {
    m.set_val_loss(b.val_loss());
  } else if (vb == 0) {
    m.set_val_loss(a.val_loss());
  } else {
    m.set_val_loss(Mean(a.val_loss(), va, b.val_loss(), vb));
  }
  return m;
}

bool TrainingSeries::Add(const MetricsPoint& point) {
  MetricsPoint p = point;
  p.set_count(1);
  p.set_first_step(p.step());
  const bool has_val = !std::isnan(p.val_loss());
  p.set_val_count(has_val ? 1 : 0);
  if (!has_val) p.set_val_loss(std::numeric_limits<double>::quiet_NaN());
  if (latest_.count() > 0 && p.step() <= latest_.step()) {
    if (p.attempt() <= latest_.attempt()) {  // sent again: fill a hole, never cut
      if (Covers(p.step())) return false;
      Insert(p);
      return true;
    }
    Truncate(p.step());  // a later attempt resumed from an older checkpoint
  }
  latest_ = p;
  pending_ = pending_.count() == 0 ? p : Merge(pending_, p);
  if (pending_.count() >= stride_) {
    Push(pending_);
    pending_.Clear();
  }
  return true;
}

bool TrainingSeries::Covers(int64_t step) const {
  if (pending_.count() > 0 && pending_.first_step() <= step && step <= pending_.step()) {
    return true;
  }
  auto it = std::lower_bound(points_.begin(), points_.end(), step,
                             [](const MetricsPoint& q, int64_t s) { return q.step() < s; });
  return it != points_.end() && it->first_step() <= step;
}

void TrainingSeries::Insert(const MetricsPoint& p) {
  // Below the newest step and covered by no point: before the pending point, if any.
  auto it = std::lower_bound(points_.begin(), points_.end(), p.step(),
                             [](const MetricsPoint& q, int64_t s) { return q.step() < s; });
  points_.insert(it, p);
  HalveIfFull();
}

void TrainingSeries::Push(const MetricsPoint& p) {
  points_.push_back(p);
  HalveIfFull();
}

void TrainingSeries::HalveIfFull() {
  if (static_cast<int>(points_.size()) < capacity_) return;
  std::vector<MetricsPoint> halved;
  halved.reserve(points_.size() / 2 + 1);
  for (size_t i = 0; i + 1 < points_.size(); i += 2) {
    halved.push_back(Merge(points_[i], points_[i + 1]));
  }
  if (points_.size() % 2 == 1) halved.push_back(points_.back());
  points_ = std::move(halved);
  stride_ *= 2;
}

void TrainingSeries::Truncate(int64_t step) {
  while (!points_.empty() && points_.back().step() >= step) points_.pop_back();
  if (pending_.count() > 0 && pending_.step() >= step) pending_.Clear();
}

std::vector<MetricsPoint> TrainingSeries::Points() const {
  std::vector<MetricsPoint> out = points_;
  if (pending_.count() > 0) out.push_back(pending_);
  return out;
}

int64_t TrainingSeries::reported_steps() const {
  int64_t n = pending_.count();
  for (const MetricsPoint& p : points_) n += p.count();
  return n;
}

JobMetricsRecord TrainingSeries::ToRecord(const std::string& job_id) const {
  JobMetricsRecord r;
  r.set_job_id(job_id);
  r.mutable_points()->Reserve(static_cast<int>(points_.size()));
  for (const MetricsPoint& p : points_) *r.add_points() = p;
  if (pending_.count() > 0) *r.mutable_pending() = pending_;
  r.set_stride(stride_);
  if (latest_.count() > 0) *r.mutable_latest() = latest_;
  r.set_capacity(capacity_);
  return r;
}

TrainingSeries TrainingSeries::FromRecord(const JobMetricsRecord& record, int capacity) {
  TrainingSeries s(capacity);
  s.stride_ = std::max<int64_t>(1, record.stride());
  s.points_.assign(record.points().begin(), record.points().end());
  s.pending_ = record.pending();
  s.latest_ = record.latest();
  // A smaller capacity than the record was written with: merge until the points fit.
  while (static_cast<int>(s.points_.size()) >= s.capacity_) {
    MetricsPoint last = s.points_.back();
    s.points_.pop_back();
    s.Push(last);
  }
  return s;
}

}  // namespace shardline::coordinator
