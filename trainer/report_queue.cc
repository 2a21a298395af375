#include "trainer/report_queue.h"

#include <utility>

#include "common/logging.h"

namespace shardline::trainer {

ReportQueue::ReportQueue(size_t capacity, absl::Duration drain_timeout)
    : capacity_(capacity < 1 ? 1 : capacity), drain_timeout_(drain_timeout) {
  thread_ = std::thread([this] { Loop(); });
}

ReportQueue::~ReportQueue() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    stop_at_ = absl::Now() + drain_timeout_;
  }
  thread_.join();
}

void ReportQueue::Push(std::string what, Send send) {
  absl::MutexLock lock(&mu_);
  if (queue_.size() >= capacity_) {
    SL_LOG(WARNING) << "report queue full (" << capacity_ << "): dropping the report of "
                    << queue_.front().what << " (the coordinator is slow or unreachable)";
    queue_.pop_front();
    ++dropped_;
  }
  queue_.push_back({std::move(what), std::move(send)});
}

int64_t ReportQueue::dropped() const {
  absl::MutexLock lock(&mu_);
  return dropped_;
}

void ReportQueue::WaitIdle() const {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(this, &ReportQueue::Idle));
}

bool ReportQueue::Idle() const { return queue_.empty() && !busy_; }

bool ReportQueue::HasWork() const { return !queue_.empty() || stopping_; }

void ReportQueue::Loop() {
  absl::MutexLock lock(&mu_);
  while (true) {
    mu_.Await(absl::Condition(this, &ReportQueue::HasWork));
    if (queue_.empty()) return;  // stopping, nothing left
    if (stopping_ && absl::Now() >= stop_at_) {
      SL_LOG(WARNING) << "exiting with " << queue_.size()
                      << " report(s) unsent (the coordinator is slow or unreachable)";
      dropped_ += static_cast<int64_t>(queue_.size());
      queue_.clear();
      return;
    }
    Item item = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    mu_.Unlock();
    const absl::Status s = item.send();
    if (!s.ok()) SL_LOG(WARNING) << "reporting " << item.what << " to the coordinator: " << s;
    mu_.Lock();
    busy_ = false;
  }
}

}  // namespace shardline::trainer
