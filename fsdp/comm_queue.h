// CommQueue: the communication thread of a CPU communicator. Collectives are queued as
// closures and run one at a time in issue order (every rank issues the same sequence, so the
// order matches across ranks); each returns a CommHandle whose Wait() blocks on the result.
//
// Thread safety: Enqueue may be called from any thread; the closures run on the queue's own
// thread. The destructor runs what is already queued, then joins the thread.
#ifndef SHARDLINE_FSDP_COMM_QUEUE_H_
#define SHARDLINE_FSDP_COMM_QUEUE_H_

#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "fsdp/communicator.h"

namespace shardline::fsdp {

// A handle on a status that is already known (argument errors, size-1 groups).
class ReadyHandle : public CommHandle {
 public:
  explicit ReadyHandle(absl::Status status) : status_(std::move(status)) {}
  absl::Status Wait() override { return status_; }

 private:
  absl::Status status_;
};

class CommQueue {
 public:
  CommQueue();
  ~CommQueue();

  // Queues `work`; the handle's Wait() returns its status once it ran.
  std::unique_ptr<CommHandle> Enqueue(std::function<absl::Status()> work);

 private:
  struct Task {
    std::function<absl::Status()> work;
    std::promise<absl::Status> done;
  };
  void Loop();

  absl::Mutex mu_;
  std::deque<Task> tasks_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace shardline::fsdp

#endif  // SHARDLINE_FSDP_COMM_QUEUE_H_
