// ActivationCheckpointer: activation checkpointing of the FSDP engine's hook groups
// (FsdpEngineOptions::activation_checkpointing; docs/fsdp_step.md).
//
// Run(body, input) computes body(input) without grad, saving only the input and the RNG state of
// its device, inside an autograd node whose backward runs the body again with grad (that RNG
// state restored, so dropout draws the same mask) and backpropagates through the recomputed
// graph (a reentrant autograd call). The engine attaches its pre-backward hook to Run's output,
// so in backward the hook re-gathers the unit before this node recomputes. The unit's parameter
// gradients accumulate during the recompute's backward as without checkpointing, so losses and
// gradients are bit-identical.
//
// Bodies are kept (by value) until Clear(); they must capture by value (fsdp/unit_runner.h).
// Errors: what the body throws, unchanged (an engine collective's common/torch_status.h
// StatusException included).
// Thread safety: the training thread; the backward runs on LibTorch's autograd thread while the
// training thread blocks in backward.
#ifndef SHARDLINE_FSDP_ACTIVATION_CHECKPOINT_H_
#define SHARDLINE_FSDP_ACTIVATION_CHECKPOINT_H_

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

#include "fsdp/unit_runner.h"

namespace shardline::fsdp {

namespace internal {
struct CheckpointFunction;
}  // namespace internal

class ActivationCheckpointer {
 public:
  // body(input) under a checkpointing autograd node; call only with grad mode on.
  at::Tensor Run(const UnitBody& body, const at::Tensor& input);
  // Drops the bodies of this forward (the engine calls it when Backward() returns).
  void Clear() { calls_.clear(); }

 private:
  friend struct internal::CheckpointFunction;
  struct Call {
    UnitBody body;
    at::Tensor rng_state;  // Of the input's device's default generator, before the forward.
  };
  // The node's forward (no grad) and backward (recompute with grad; returns the input's
  // gradient, undefined if it needs none).
  at::Tensor Forward(int64_t call, const at::Tensor& input);
  at::Tensor Backward(int64_t call, const at::Tensor& input, bool input_requires_grad,
                      const at::Tensor& grad);

  std::vector<Call> calls_;
};

}  // namespace shardline::fsdp

#endif  // SHARDLINE_FSDP_ACTIVATION_CHECKPOINT_H_
