// Per-step training metrics and their JSON-lines file (`trainer --metrics_out`).
//
// One line per logged step, keys named like ProgressReport's fields so the worker daemon's
// MetricsTail relays them unchanged:
//   {"step": 10, "loss": 2.51, "lr": 0.003, "grad_norm": 0.81, "step_time_s": 0.12,
//    "tokens_per_s": 17066.7, "mfu": 0.0012, "peak_memory_bytes": 313524224,
//    "rss_bytes": 310378496, "val_loss": 2.47, "rank": 0, "world_size": 4}
// val_loss appears only on steps that evaluated; "sample" only in the final line of rank 0.
// CUDA jobs add "cuda_allocated_bytes" and "cuda_max_allocated_bytes": LibTorch's caching
// allocator's bytes in tensors on the rank's GPU now and at peak since the start
// (torch.cuda.memory_allocated / max_memory_allocated), which show what fsdp.cpu_offload saves.

// Every line is written with one write(2) and flushed, so a tail sees whole lines.
//
// Thread safety: MetricsWriter is not thread-safe (the training thread writes).
#ifndef SHARDLINE_TRAINER_METRICS_H_
#define SHARDLINE_TRAINER_METRICS_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <c10/core/Device.h>

#include "absl/status/statusor.h"

namespace shardline::trainer {

struct StepMetrics {
  int64_t step = 0;  // Optimizer steps completed (1 after the first step).
  double loss = 0;   // Mean training loss of the step's global batch.
  double lr = 0;
  double grad_norm = 0;  // Global L2 norm before clipping.
  double step_time_s = 0;
  double tokens_per_s = 0;        // Global: all ranks' tokens of the step / step time.
  double mfu = 0;                 // Model FLOPs utilisation against the peak of the rank's device.
  int64_t rss_bytes = 0;          // Current resident set of this process.
  int64_t peak_memory_bytes = 0;  // Peak resident set (host) of this process.
  std::optional<int64_t> cuda_allocated_bytes;  // CUDA jobs: see above.
  std::optional<int64_t> cuda_max_allocated_bytes;
  std::optional<double> val_loss;
  std::optional<std::string> sample;
  std::optional<double> loss_scale;  // float16 mixed precision: the current loss scale...
  int64_t skipped_steps = 0;         // ...and the steps skipped for overflow so far.
  int rank = 0;
  int world_size = 1;
};

// The JSON line (no trailing newline) for `m`.
std::string MetricsToJson(const StepMetrics& m);

class MetricsWriter {
 public:
  // Creates or truncates `path`. Errors: the open error, naming the path.
  static absl::StatusOr<std::unique_ptr<MetricsWriter>> Open(const std::string& path);
  ~MetricsWriter();
  // Errors: INTERNAL when the write fails (disk full), naming the path.
  absl::Status Write(const StepMetrics& m);

 private:
  MetricsWriter(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  std::string path_;
  int fd_;
};

// Current and peak resident set size of this process, from /proc/self/status (0 if unknown).
int64_t CurrentRssBytes();
int64_t PeakRssBytes();

// For a CUDA device: sets m's cuda_* fields from LibTorch's caching allocator. Other devices:
// leaves them unset.
void FillDeviceMemory(const c10::Device& device, StepMetrics* m);

}  // namespace shardline::trainer

#endif  // SHARDLINE_TRAINER_METRICS_H_
