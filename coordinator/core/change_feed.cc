#include "coordinator/core/change_feed.h"

#include "absl/strings/str_cat.h"

namespace shardline::coordinator {

void ChangeFeed::AddJob(const std::string& job_id) { versions_[job_id] = next_version_++; }

void ChangeFeed::JobChanged(const std::string& job_id) {
  versions_[job_id] = next_version_++;
  dirty_jobs_.insert(job_id);
  changed_.SignalAll();
}

void ChangeFeed::ForgetJob(const std::string& job_id) {
  versions_.erase(job_id);
  dirty_jobs_.erase(job_id);
}

void ChangeFeed::WorkerChanged(const std::string& worker_id) {
  dirty_workers_.insert(worker_id);
  changed_.SignalAll();
}

void ChangeFeed::NamespaceChanged(const std::string& ns) {
  dirty_namespaces_.insert(ns);
  changed_.SignalAll();
}

void ChangeFeed::VotesChanged(const std::string& job_id) {
  dirty_votes_.insert(job_id);
  changed_.SignalAll();
}

int64_t ChangeFeed::Version(const std::string& job_id) const {
  auto it = versions_.find(job_id);
  return it == versions_.end() ? 0 : it->second;
}

void ChangeFeed::Shutdown() {
  shutdown_ = true;
  changed_.SignalAll();
}

bool ChangeFeed::WaitLocked(absl::Mutex* mu, absl::Time deadline) const {
  return changed_.WaitWithDeadline(mu, deadline);
}

absl::Status ChangeFeed::WaitForJobLocked(absl::Mutex* mu, const std::string& job_id,
                                          int64_t after_version, absl::Time deadline,
                                          int64_t* version) const {
  while (true) {
    auto it = versions_.find(job_id);
    if (it == versions_.end()) return absl::NotFoundError(absl::StrCat("unknown job ", job_id));
    *version = it->second;
    if (*version > after_version) return absl::OkStatus();
    if (shutdown_) return absl::UnavailableError("coordinator is shutting down");
    if (changed_.WaitWithDeadline(mu, deadline)) {
      *version = versions_.at(job_id);
      return absl::OkStatus();
    }
  }
}

bool ChangeFeed::WaitDirtyLocked(absl::Mutex* mu, absl::Duration wait, Dirty* dirty) {
  const absl::Time deadline = absl::Now() + wait;
  while (!shutdown_ && dirty_workers_.empty() && dirty_jobs_.empty() && dirty_namespaces_.empty() &&
         dirty_votes_.empty()) {
    if (changed_.WaitWithDeadline(mu, deadline)) break;
  }
  dirty->workers.assign(dirty_workers_.begin(), dirty_workers_.end());
  dirty->jobs.assign(dirty_jobs_.begin(), dirty_jobs_.end());
  dirty->namespaces.assign(dirty_namespaces_.begin(), dirty_namespaces_.end());
  dirty->votes.assign(dirty_votes_.begin(), dirty_votes_.end());
  dirty_workers_.clear();
  dirty_jobs_.clear();
  dirty_namespaces_.clear();
  dirty_votes_.clear();
  return !shutdown_;
}

}  // namespace shardline::coordinator
