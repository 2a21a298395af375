// FakeClock: a Clock that only moves when a test advances it.
//
// Thread safety: Now() and Advance() may race; both take a mutex.
#ifndef SHARDLINE_COMMON_TESTING_FAKE_CLOCK_H_
#define SHARDLINE_COMMON_TESTING_FAKE_CLOCK_H_

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace shardline {

class FakeClock : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1700000000)) : now_(start) {}

  absl::Time Now() const override {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shardline

#endif  // SHARDLINE_COMMON_TESTING_FAKE_CLOCK_H_
