// MetricsTail: follows a trainer's --metrics_out file (JSON lines, one per logged step) and turns
// each new complete line into a ProgressReport for the coordinator. Keys that match
// ProgressReport's field names (step, loss, lr, grad_norm, step_time_s, tokens_per_s, mfu,
// peak_memory_bytes, val_loss, sample) are taken; others are ignored, so the trainer may log more.
//
// Thread safety: not thread-safe; one supervision thread polls it.
#ifndef SHARDLINE_WORKER_METRICS_TAIL_H_
#define SHARDLINE_WORKER_METRICS_TAIL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/coordinator.pb.h"

namespace shardline::worker {

class MetricsTail {
 public:
  explicit MetricsTail(std::string path) : path_(std::move(path)) {}

  // Reports parsed from lines completed since the last call (a half-written last line waits for
  // the next call). A missing file yields no reports. A line that is not valid JSON is skipped
  // and counted in bad_lines().
  std::vector<ProgressReport> Poll();

  int64_t bad_lines() const { return bad_lines_; }

 private:
  std::string path_;
  int64_t offset_ = 0;
  int64_t bad_lines_ = 0;
};

}  // namespace shardline::worker

#endif  // SHARDLINE_WORKER_METRICS_TAIL_H_
