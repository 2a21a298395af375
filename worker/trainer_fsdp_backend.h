// FsdpBackend: the TrainingBackend over the FSDP engine (fsdp/fsdp_engine.h) and its sharded
// AdamW/SGD (fsdp/sharded_optimizer.h), for any W = R x S. Losses and metrics are summed over
// the world communicator.
//
// Thread safety: training thread only.
#ifndef SHARDLINE_WORKER_TRAINER_FSDP_BACKEND_H_
#define SHARDLINE_WORKER_TRAINER_FSDP_BACKEND_H_

#include <memory>
#include <string>

#include <torch/nn/module.h>

#include "absl/status/statusor.h"
#include "fsdp/communicator.h"
#include "fsdp/fsdp_engine.h"
#include "fsdp/sharded_optimizer.h"
#include "models/language_model.h"
#include "worker/trainer_backend.h"
#include "worker/trainer_config.h"

namespace shardline::worker {

class FsdpBackend : public TrainingBackend {
 public:
  struct Comms {
    fsdp::Communicator* world = nullptr;      // All W ranks.
    fsdp::Communicator* shard = nullptr;      // This rank's shard group (S ranks).
    fsdp::Communicator* replicate = nullptr;  // This rank's replicate group (R ranks).
  };
  // Wraps `model` (fp32, on its device) per config.layout and config.wrap_policy, parameters
  // broadcast from rank 0, and attaches the engine as the model's UnitRunner (detached again by
  // the destructor). A model without RunUnit hook points (block_type() == "", TorchScript) is
  // one unit under TRANSFORMER_BLOCK. The model and communicators are borrowed.
  // Errors: INVALID_ARGUMENT for a bad wrap policy or communicator shapes; the broadcast's
  // error. (Options the engine lacks are refused earlier, by spec validation.)
  static absl::StatusOr<std::unique_ptr<FsdpBackend>> Create(models::LanguageModel& model,
                                                             const TrainerConfig& config,
                                                             int rank, const Comms& comms);
  ~FsdpBackend() override;

  std::string Describe() const override;
  void set_step(int64_t step) override;
  absl::Status BeginForward() override { return engine_->BeginForward(); }
  absl::Status Backward(const at::Tensor& loss, bool sync) override {
    return engine_->Backward(loss, sync);
  }
  absl::StatusOr<double> Step(double lr) override;
  void EndForward() override { engine_->ReshardAll(); }
  absl::Status AllReduceSum(const at::Tensor& values) override;
  int64_t StateBytes() const override;

  fsdp::FsdpEngine* engine() { return engine_.get(); }
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
        optimizer_(std::move(optimizer)) {}
  models::LanguageModel& model_;
  TrainerConfig config_;
  Comms comms_;
  std::unique_ptr<fsdp::FsdpEngine> engine_;
  std::unique_ptr<fsdp::ShardedOptimizer> optimizer_;
};

}  // namespace shardline::worker

#endif  // SHARDLINE_WORKER_TRAINER_FSDP_BACKEND_H_
