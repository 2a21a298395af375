// TrainingBackend: how a training step's backward, gradient reduction and optimizer update run,
// so that one loop (trainer/train_loop.h) drives both
//   LocalBackend  one process, plain torch::optim AdamW/SGD on the whole model (W = 1), and
//   FsdpBackend   the FSDP engine (fsdp/fsdp_engine.h) with its sharded optimizer, any W.
// Both follow the same contract, so a W = 1 run gives the same losses with either (tested).
//
// Step protocol, per optimizer step:
//   for each of A micro-batches:
//     BeginForward(); loss = model.Forward(...); Backward(loss / A, /*sync=*/last);
//   norm = Step(lr);
// Evaluation and sampling forwards (no backward): BeginForward(); Forward(...); EndForward().
//
// Thread safety: training thread only.
#ifndef SHARDLINE_TRAINER_BACKEND_H_
#define SHARDLINE_TRAINER_BACKEND_H_

#include <cstdint>
#include <optional>
#include <string>

#include <ATen/core/Tensor.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace shardline::trainer {

class TrainingBackend {
 public:
  virtual ~TrainingBackend() = default;
  virtual std::string Describe() const = 0;

  // Sets the step quoted in collective error messages.
  virtual void set_step(int64_t step) = 0;
  // Before every forward pass.
  virtual absl::Status BeginForward() = 0;
  // Backpropagates `loss` (already divided by the accumulation steps). With sync == false the
  // gradients only accumulate locally (no communication); the last micro-batch syncs.
  virtual absl::Status Backward(const at::Tensor& loss, bool sync) = 0;
  // Clips to the configured global norm, updates parameters with learning rate `lr`, zeroes the
  // gradients. Returns the global gradient norm before clipping.
  virtual absl::StatusOr<double> Step(double lr) = 0;
  // After a forward without backward (evaluation, sampling): releases gathered parameters.
  virtual void EndForward() = 0;
  // In place: `values` (float64, CPU) becomes its sum over all ranks.
  virtual absl::Status AllReduceSum(const at::Tensor& values) = 0;
  // Bytes of optimizer state + sharded parameters + gradients this rank holds (for logs).
  virtual int64_t StateBytes() const = 0;
  // A collective that failed after its wait returned (CUDA: NCCL's waits only order the device;
  // the communicator's watchdog fails a collective past its deadline later), or OK. Meaningful
  // once the host has read a value computed after the collectives (the step's loss).
  virtual absl::Status CommunicationError() const { return absl::OkStatus(); }
  // float16 loss scaling: the current scale and the steps skipped so far (none without it).
  virtual std::optional<double> loss_scale() const { return std::nullopt; }
  virtual int64_t skipped_steps() const { return 0; }
};

}  // namespace shardline::trainer

#endif  // SHARDLINE_TRAINER_BACKEND_H_
