// ShardedOptimizer: AdamW or SGD (momentum) stepping on each rank's fp32 parameter shards only.
//
// State (exp_avg, exp_avg_sq, or momentum_buffer) exists only for the valid (non-padding)
// elements of this rank's shard of each flat parameter, so optimizer memory is P/S per tensor.
// The update formulas follow LibTorch's torch::optim::AdamW / SGD element for element (decoupled
// weight decay, bias correction; SGD without dampening or Nesterov), so sharded training matches
// an unsharded LibTorch run.
//
// CPU offload (FsdpEngineOptions::cpu_offload): the state lives in host memory next to the
// offloaded shards and Step() runs on the host; only the norm's one-element all-reduce visits the
// engine's device (NCCL reduces CUDA tensors only). The state is ordinary (pageable) host memory:
// unlike the parameter shard it is never copied to or from the device, so pinning it would only
// take page-locked memory from the system.
//
// Gradient clipping: the global L2 norm is sqrt(all-reduce over the SHARD group of the sum of
// squares of the local shard gradients). Replicas (HYBRID_*, NO_SHARD) hold identical shards after
// the replicate all-reduce, so reducing over the replicate group too would count each element
// R times. Clipping scales gradients by min(1, max_norm / (norm + 1e-6)), as
// torch::nn::utils::clip_grad_norm_ does.
//
// Thread safety: training thread only; Step() is a collective over the shard group.
#ifndef SHARDLINE_FSDP_SHARDED_OPTIMIZER_H_
#define SHARDLINE_FSDP_SHARDED_OPTIMIZER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fsdp/fsdp_engine.h"

namespace shardline::fsdp {

struct ShardedOptimizerOptions {
  enum class Kind { kAdamW, kSgd };
  Kind kind = Kind::kAdamW;
  double lr = 1e-3;
  double weight_decay = 0.0;  // AdamW: decoupled; SGD: L2 added to the gradient.
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // AdamW.
  double momentum = 0.0;                          // SGD.
  double grad_clip = 0.0;                         // Max global L2 norm; 0 disables.
  // AdamW only: one pass of LibTorch's fused kernel (at::_fused_adamw_, what
  // torch.optim.AdamW(fused=True) calls) over all shards per step, with the clipping coefficient
  // and the loss-scale unscaling folded into its grad_scale, and the norm's sum of squares taken
  // in one float64-accumulating pass on the host. The default op-by-op update makes about a dozen
  // passes over the state (and allocates temporaries): negligible on a GPU, but with cpu_offload
  // the step runs on the host, where those passes dominated the step (GPT-2 small on the H200
  // machine: 432 ms per step, ~10x the step without offload). Results differ from the op-by-op
  // update in float rounding only. The trainer enables it for every AdamW job: on CUDA (one
  // kernel launch per step instead of about a dozen per flat parameter) and on the CPU (LibTorch
  // 2.11 has a CPU kernel for it; with or without cpu_offload).
  bool fused = false;
};

class ShardedOptimizer {
 public:
  // `engine` is borrowed and must outlive the optimizer.
  // Errors: INVALID_ARGUMENT naming the option for lr <= 0, betas outside [0, 1), eps <= 0,
  // momentum outside [0, 1), negative weight_decay or grad_clip.
  static absl::StatusOr<std::unique_ptr<ShardedOptimizer>> Create(
      FsdpEngine* engine, const ShardedOptimizerOptions& options);

  // Learning rate for the next Step() (the caller's schedule).
  void set_lr(double lr) { options_.lr = lr; }
  double lr() const { return options_.lr; }

  // Clips (if grad_clip > 0), updates the local shards, zeroes the gradient shards. Returns the
  // global gradient norm before clipping (after unscaling, see set_grad_scale). Errors:
  // FAILED_PRECONDITION while no_sync gradients are pending (the last micro-batch must call
  // Backward with sync_gradients=true); a collective's error.
  absl::StatusOr<double> Step();

  // Loss scaling (fsdp/loss_scaler.h): the gradients were computed from loss * scale; Step()
  // divides them by it first, and when the (global) norm is then inf or nan it skips the update
  // (no parameter, state or step-count change), zeroes the gradients and sets
  // last_step_skipped(). With scale 1 (the default) nothing is skipped: a non-finite norm then
  // updates as LibTorch's optimizers would.
  void set_grad_scale(double scale) { grad_scale_ = scale; }
  bool last_step_skipped() const { return last_step_skipped_; }

  int64_t step_count() const { return step_; }
  void set_step_count(int64_t step) { step_ = step; }  // When restoring a checkpoint.

  // Bytes of optimizer state held by this rank.
  int64_t state_bytes() const;

  // This rank's optimizer state, one slice per original parameter and state kind, named
  // "<param>.exp_avg", "<param>.exp_avg_sq" (AdamW) or "<param>.momentum_buffer" (SGD), with the
  // same [start, end) as FsdpEngine::LocalParamState. `local` views the state: copy_() to load.
  std::vector<ShardSlice> LocalState() const;

  // Optimizer state of every parameter at its full shape, named as in LocalState() (collective
  // over the shard group: call on every rank; with rank0_only other ranks get an empty list).
  absl::StatusOr<std::vector<std::pair<std::string, at::Tensor>>> FullState(bool rank0_only);
  // Loads full-shape state (each rank keeps its own range); the step count is set separately
  // (set_step_count). Errors: INVALID_ARGUMENT naming a missing tensor or a shape mismatch.
  absl::Status LoadFullState(const std::map<std::string, at::Tensor>& state);

 private:
  ShardedOptimizer(FsdpEngine* engine, const ShardedOptimizerOptions& options);
  // The state kinds in use: (suffix, per-flat-param tensors).
  std::vector<std::pair<const char*, std::vector<at::Tensor>*>> Kinds();
  // The fused AdamW update of every shard; gradients are divided by grad_divisor first.
  void FusedAdamW(double grad_divisor);

  FsdpEngine* engine_;
  ShardedOptimizerOptions options_;
  int64_t step_ = 0;
  double grad_scale_ = 1.0;
  bool last_step_skipped_ = false;
  // Per flat parameter, [valid_shard_numel] each.
  std::vector<at::Tensor> exp_avg_, exp_avg_sq_, momentum_;
  // fused: the step count as the float32 scalar per parameter that the fused kernel reads.
  std::vector<at::Tensor> step_tensors_;
};

// Persistent bytes per rank: parameter shards + gradient shards + optimizer state (what the
// architecture's 16*P/S estimate for AdamW counts).
int64_t PersistentStateBytes(const FsdpEngine& engine, const ShardedOptimizer& optimizer);
// The part of it held on the engine's compute device: all of it without cpu_offload, 0 with it.
int64_t DevicePersistentStateBytes(const FsdpEngine& engine, const ShardedOptimizer& optimizer);

}  // namespace shardline::fsdp

#endif  // SHARDLINE_FSDP_SHARDED_OPTIMIZER_H_
