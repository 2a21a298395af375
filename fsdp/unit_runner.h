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
// Errors: a runner that must fail inside forward throws common/torch_status.h's StatusException
// (the FSDP engine does for a failed collective); the caller's TorchTry / TorchCall around the
// forward turns it back into that status (e.g. UNAVAILABLE for a lost peer).
//
// Thread safety: called from the training thread only.
#ifndef SHARDLINE_FSDP_UNIT_RUNNER_H_
#define SHARDLINE_FSDP_UNIT_RUNNER_H_

#include <functional>

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

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

}  // namespace shardline::fsdp

#endif  // SHARDLINE_FSDP_UNIT_RUNNER_H_
