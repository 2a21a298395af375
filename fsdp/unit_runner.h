// UnitRunner: the seam between a model's forward and the FSDP engine.
//
// LibTorch's C++ modules have no forward hooks, so a model that wants its blocks sharded as
// separate FSDP units calls RunUnit() around each block's forward. Without an engine attached
// (runner == nullptr) RunUnit just calls the body, so the same model runs unsharded.
//
//   auto block = blocks_->ptr<Block>(i);
//   x = RunUnit(runner_, *block, x, [block](const at::Tensor& h) { return block->forward(h); });
//
// The body must capture what it uses BY VALUE and compute the same function when called again:
// with activation checkpointing the engine keeps it and calls it a second time during backward,
// after the model's forward returned (with the RNG state of the first call restored).
//
// The engine uses the call to gather the unit's parameters (or wait for a prefetch), rebind the
// module's parameters as views into the gathered buffer, run the body, attach the pre-backward
// hook to the output, and free or keep the gathered buffer per the sharding strategy. Units
// without a RunUnit call (the root: embeddings, final norm, head) are gathered at the start of
// forward and stay gathered until their gradients are reduced.
//
// Errors: the engine reports a failed collective inside forward by throwing fsdp::CommError
// (a std::runtime_error carrying an absl::Status); callers convert with fsdp::StatusFromCommError
// or common/torch_status.h at the training-step boundary.
//
// Thread safety: called from the training thread only.
#ifndef SHARDLINE_FSDP_UNIT_RUNNER_H_
#define SHARDLINE_FSDP_UNIT_RUNNER_H_

#include <functional>
#include <stdexcept>
#include <string>

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include "absl/status/status.h"

namespace shardline::fsdp {

using UnitBody = std::function<at::Tensor(const at::Tensor&)>;

class UnitRunner {
 public:
  virtual ~UnitRunner() = default;
  // Runs `body(input)` as the forward of the unit that owns `module`'s parameters.
  virtual at::Tensor Run(const torch::nn::Module& module, const at::Tensor& input,
                         const UnitBody& body) = 0;
};

inline at::Tensor RunUnit(UnitRunner* runner, const torch::nn::Module& module,
                          const at::Tensor& input, const UnitBody& body) {
  return runner == nullptr ? body(input) : runner->Run(module, input, body);
}

// Thrown through LibTorch's forward/backward (which cannot return a Status) when a collective
// fails; carries the collective's status.
class CommError : public std::runtime_error {
 public:
  explicit CommError(absl::Status status)
      : std::runtime_error(std::string(status.message())), status_(std::move(status)) {}
  const absl::Status& status() const { return status_; }

 private:
  absl::Status status_;
};

}  // namespace shardline::fsdp

#endif  // SHARDLINE_FSDP_UNIT_RUNNER_H_
