// DynamicLossScaler: dynamic loss scaling for float16 mixed precision (what torch.amp.GradScaler
// does). float16 flushes gradients below ~6e-8 to zero and overflows above 65504, so the loss is
// multiplied by scale() before backward and the gradients divided by it before the optimizer
// (ShardedOptimizer::set_grad_scale). A step whose gradients hold inf/nan is skipped (no update)
// and the scale halved; after growth_interval good steps in a row it doubles.
//
// The decision uses the global gradient norm, which is the same on every rank (all-reduced), so
// every rank skips the same steps and keeps the same scale.
//
// Thread safety: not thread-safe; training thread only.
#ifndef SHARDLINE_FSDP_LOSS_SCALER_H_
#define SHARDLINE_FSDP_LOSS_SCALER_H_

#include <cstdint>

namespace shardline::fsdp {

struct LossScalerOptions {
  double init_scale = 65536.0;  // 2^16, as torch.amp.GradScaler.
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int growth_interval = 2000;
  double min_scale = 1.0;  // Never below: a scale of 1 is plain fp16 training.
};

class DynamicLossScaler {
 public:
  explicit DynamicLossScaler(const LossScalerOptions& options = {})
      : options_(options), scale_(options.init_scale) {}

  double scale() const { return scale_; }
  // After each optimizer step: found_nonfinite = the step's gradients held inf/nan (skipped).
  void Update(bool found_nonfinite);

  int64_t skipped_steps() const { return skipped_; }

  // The whole state, for the heal of a replica group's replacement (trainer/
  // replica_fault_tolerance.h): scale, steps since the last overflow, steps skipped.
  struct State {
    double scale = 0;
    int good_steps = 0;
    int64_t skipped = 0;
  };
  State state() const { return {scale_, good_steps_, skipped_}; }
  void set_state(const State& s) {
    scale_ = s.scale;
    good_steps_ = s.good_steps;
    skipped_ = s.skipped;
  }

 private:
  LossScalerOptions options_;
  double scale_;
  int good_steps_ = 0;
  int64_t skipped_ = 0;
};

}  // namespace shardline::fsdp

#endif  // SHARDLINE_FSDP_LOSS_SCALER_H_
