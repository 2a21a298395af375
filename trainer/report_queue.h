// ReportQueue: best-effort reports sent off the caller's thread, in order, by one thread of its
// own. A caller (the checkpoint save path) must not wait on the coordinator: a hung coordinator
// would stall training at every save for the client's deadline (found by the chaos soak, #30).
//
// Bounded: past `capacity` queued reports the oldest is dropped and counted (a report the
// coordinator needs is sent another way: rank 0's commit report names every data file). The
// destructor sends what is queued for at most `drain_timeout`, then drops the rest; it waits
// for the report in flight (bounded by the client's deadline).
//
// Thread safety: Push may be called from any thread.
#ifndef SHARDLINE_TRAINER_REPORT_QUEUE_H_
#define SHARDLINE_TRAINER_REPORT_QUEUE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace shardline::trainer {

class ReportQueue {
 public:
  // `send` performs one report; its error is logged with the report's `what`.
  using Send = std::function<absl::Status()>;
  explicit ReportQueue(size_t capacity = 64, absl::Duration drain_timeout = absl::Seconds(5));
  ~ReportQueue();
  ReportQueue(const ReportQueue&) = delete;
  ReportQueue& operator=(const ReportQueue&) = delete;

  // Queues `send`; returns at once. `what` names the report in logs ("checkpoint step 5").
  void Push(std::string what, Send send);

  // Reports dropped so far (queue full, or left at destruction).
  int64_t dropped() const;
  // Blocks until every report pushed so far was sent or dropped (tests).
  void WaitIdle() const;

 private:
  struct Item {
    std::string what;
    Send send;
  };
  void Loop();
  bool Idle() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool HasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t capacity_;
  const absl::Duration drain_timeout_;
  mutable absl::Mutex mu_;
  std::deque<Item> queue_ ABSL_GUARDED_BY(mu_);
  bool busy_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time stop_at_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  int64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace shardline::trainer

#endif  // SHARDLINE_TRAINER_REPORT_QUEUE_H_
