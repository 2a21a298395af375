// FsdpBackend: the TrainingBackend over the FSDP engine (fsdp/fsdp_engine.h) and its sharded
// AdamW/SGD (fsdp/sharded_optimizer.h), for any W = R x S. Losses and metrics are summed over
// the world communicator.
//
// Thread safety: training thread only.
#ifndef SHARDLINE_TRAINER_FSDP_BACKEND_H_
#define SHARDLINE_TRAINER_FSDP_BACKEND_H_

#include <memory>
#include <optional>
#include <string>

#include <torch/nn/module.h>

#include "absl/status/statusor.h"
#include "fsdp/communicator.h"
#include "fsdp/fsdp_engine.h"
#include "fsdp/loss_scaler.h"
#include "fsdp/sharded_optimizer.h"
#include "models/language_model.h"
#include "trainer/backend.h"
#include "trainer/config.h"

namespace shardline::trainer {

class FsdpBackend : public TrainingBackend {
 public:
  struct Comms {
    fsdp::Communicator* world = nullptr;      // All W ranks.
    fsdp::Communicator* shard = nullptr;      // This rank's shard group (S ranks).
    fsdp::Communicator* replicate = nullptr;  // This rank's replicate group (R ranks).
  };
  // Wraps `model` (fp32, on its device) per config.layout and config.engine, parameters
  // broadcast from rank 0, and attaches the engine as the model's UnitRunner (detached again by
  // the destructor). A model without RunUnit hook points (block_type() == "", TorchScript) is
  // one unit under TRANSFORMER_BLOCK. The model and communicators are borrowed.
  // Errors: INVALID_ARGUMENT for a bad wrap policy or communicator shapes; the broadcast's
  // error. (Options the engine lacks are refused earlier, by spec validation.)
  // A model created with InitMode::kDeferred (storage-less parameters, deferred_init() set) is
  // initialized sharded: this rank builds only its shards, on `device` (fsdp/param_init.h);
  // RESOURCE_EXHAUSTED when they do not fit. Other models must already be on `device`.
  static absl::StatusOr<std::unique_ptr<FsdpBackend>> Create(models::LanguageModel& model,
                                                             const TrainerConfig& config, int rank,
                                                             const Comms& comms,
                                                             at::Device device = at::kCPU);
  ~FsdpBackend() override;

  std::string Describe() const override;
  void set_step(int64_t step) override;
  absl::Status BeginForward() override { return engine_->BeginForward(); }
  // With fsdp.mixed_precision.param_dtype FP16 the loss is scaled (fsdp/loss_scaler.h) and Step
  // unscales, skipping steps whose gradients overflowed.
  absl::Status Backward(const at::Tensor& loss, bool sync) override;
  absl::StatusOr<double> Step(double lr) override;
  void EndForward() override { engine_->ReshardAll(); }
  absl::Status AllReduceSum(const at::Tensor& values) override;
  int64_t StateBytes() const override;
  absl::Status CommunicationError() const override;
  // This rank's peak gathered parameter and unsharded gradient bytes so far, and the units'
  // padded sizes (the first 16), for the log at the end of training: "FSDP memory: peak gathered
  // parameters 482304 bytes, ...; units (padded elements): root=20608 blocks.0=49984 ...".
  std::string MemorySummary() const;
  std::optional<double> loss_scale() const override;
  int64_t skipped_steps() const override;

  // Replica-group fault tolerance: the communicators of a new membership (borrowed, as in
  // Create), between steps; the engine's FsdpEngine::SetCommunicators (its errors).
  absl::Status SetCommunicators(const Comms& comms);

  fsdp::FsdpEngine* engine() { return engine_.get(); }
  // float16 loss scaling's scaler (null otherwise), for the heal.
  fsdp::DynamicLossScaler* scaler() { return scaler_.has_value() ? &*scaler_ : nullptr; }
  fsdp::ShardedOptimizer* optimizer() { return optimizer_.get(); }
  fsdp::Communicator* world() const { return comms_.world; }

 private:
  FsdpBackend(models::LanguageModel& model, const TrainerConfig& config, const Comms& comms,
              std::unique_ptr<fsdp::FsdpEngine> engine,
              std::unique_ptr<fsdp::ShardedOptimizer> optimizer)
      : model_(model),
        config_(config),
        comms_(comms),
        engine_(std::move(engine)),
        optimizer_(std::move(optimizer)) {
    if (config.engine.param_dtype == fsdp::Dtype::kFloat16) scaler_.emplace();
  }
  models::LanguageModel& model_;
  TrainerConfig config_;
  Comms comms_;
  std::unique_ptr<fsdp::FsdpEngine> engine_;
  std::unique_ptr<fsdp::ShardedOptimizer> optimizer_;
  std::optional<fsdp::DynamicLossScaler> scaler_;  // float16 only.
};

}  // namespace shardline::trainer

#endif  // SHARDLINE_TRAINER_FSDP_BACKEND_H_
