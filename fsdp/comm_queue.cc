#include "fsdp/comm_queue.h"

#include <utility>

namespace shardline::fsdp {
namespace {

class FutureHandle : public CommHandle {
 public:
  explicit FutureHandle(std::shared_future<absl::Status> future) : future_(std::move(future)) {}
  absl::Status Wait() override { return future_.get(); }

 private:
  std::shared_future<absl::Status> future_;
};

}  // namespace

CommQueue::CommQueue() : thread_([this] { Loop(); }) {}

CommQueue::~CommQueue() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

std::unique_ptr<CommHandle> CommQueue::Enqueue(std::function<absl::Status()> work) {
  Task task;
  task.work = std::move(work);
  std::shared_future<absl::Status> future = task.done.get_future().share();
  {
    absl::MutexLock lock(&mu_);
    tasks_.push_back(std::move(task));
  }
  return std::make_unique<FutureHandle>(std::move(future));
}

void CommQueue::Loop() {
  while (true) {
    Task task;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](CommQueue* q)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu_) { return q->stopping_ || !q->tasks_.empty(); },
          this));
      if (tasks_.empty()) return;  // Stopping and drained.
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task.done.set_value(task.work());
  }
}

}  // namespace shardline::fsdp
