// Clock: the coordinator's only source of time, so tests can drive heartbeat timeouts, restart
// backoff and event timestamps with a fake (coordinator/testing/fake_clock.h).
//
// Thread safety: implementations are safe to call from any thread.
#ifndef SHARDLINE_COMMON_CLOCK_H_
#define SHARDLINE_COMMON_CLOCK_H_

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace shardline {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
};

// Wall-clock time.
class RealClock : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
};

}  // namespace shardline

#endif  // SHARDLINE_COMMON_CLOCK_H_
