#include "worker/progress_relay.h"

#include <iterator>
#include <utility>

namespace shardline::worker {
namespace {

void PushBounded(std::deque<ProgressRelay::Report>& q, ProgressRelay::Report r, size_t max) {
  q.push_back(std::move(r));
  while (q.size() > max) q.pop_front();
}

}  // namespace

void ProgressRelay::Add(Report report) {
  absl::MutexLock lock(&mu_);
  const Key key = report.key;
  PushBounded(ranks_[key].unsent, std::move(report), max_per_rank_);
}

void ProgressRelay::CoordinatorLost() {
  absl::MutexLock lock(&mu_);
  resend_ = true;
}

std::vector<ProgressRelay::Report> ProgressRelay::Take() {
  absl::MutexLock lock(&mu_);
  const bool resend = resend_;
  resend_ = false;
  std::vector<Report> out;
  for (auto& [key, rank] : ranks_) {
    if (resend) {
      std::move(rank.kept.begin(), rank.kept.end(), std::back_inserter(out));
      rank.kept.clear();
    }
    std::move(rank.unsent.begin(), rank.unsent.end(), std::back_inserter(out));
    rank.unsent.clear();
  }
  return out;
}

void ProgressRelay::Acknowledged(Report report, int64_t durable_step) {
  absl::MutexLock lock(&mu_);
  const std::string& job = std::get<0>(report.key);
  for (auto& [key, rank] : ranks_) {
    if (std::get<0>(key) != job) continue;
    while (!rank.kept.empty() && rank.kept.front().report.step() <= durable_step) {
      rank.kept.pop_front();
    }
  }
  if (report.report.step() <= durable_step) return;
  const Key key = report.key;
  PushBounded(ranks_[key].kept, std::move(report), max_per_rank_);
}

void ProgressRelay::Unsent(Report report) {
  absl::MutexLock lock(&mu_);
  const Key key = report.key;
  PushBounded(ranks_[key].unsent, std::move(report), max_per_rank_);
}

bool ProgressRelay::HasUnsent(const Key& key) const {
  absl::MutexLock lock(&mu_);
  auto it = ranks_.find(key);
  return it != ranks_.end() && !it->second.unsent.empty();
}

size_t ProgressRelay::Kept(const Key& key) const {
  absl::MutexLock lock(&mu_);
  auto it = ranks_.find(key);
  return it == ranks_.end() ? 0 : it->second.kept.size();
}

void ProgressRelay::Forget(const Key& key) {
  absl::MutexLock lock(&mu_);
  ranks_.erase(key);
}

}  // namespace shardline::worker
