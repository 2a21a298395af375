// LocalBackend: the single-process TrainingBackend (W = 1) with LibTorch's own optimizers
// (torch::optim::AdamW / SGD) and torch::nn::utils::clip_grad_norm_. The reference the FSDP
// backend is compared against.
//
// Thread safety: training thread only.
#ifndef SHARDLINE_TRAINER_LOCAL_BACKEND_H_
#define SHARDLINE_TRAINER_LOCAL_BACKEND_H_

#include <memory>
#include <string>

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include "absl/status/statusor.h"
#include "trainer/backend.h"
#include "trainer/config.h"

namespace shardline::trainer {

class LocalBackend : public TrainingBackend {
 public:
  // `module` is borrowed and must outlive the backend. Uses config's optimizer fields.
  static absl::StatusOr<std::unique_ptr<LocalBackend>> Create(torch::nn::Module& module,
                                                              const TrainerConfig& config);

  std::string Describe() const override;
  void set_step(int64_t) override {}
  absl::Status BeginForward() override { return absl::OkStatus(); }
  absl::Status Backward(const at::Tensor& loss, bool sync) override;
  absl::StatusOr<double> Step(double lr) override;
  void EndForward() override {}
  absl::Status AllReduceSum(const at::Tensor&) override { return absl::OkStatus(); }
  int64_t StateBytes() const override;

 private:
  LocalBackend(torch::nn::Module& module, const TrainerConfig& config,
               std::unique_ptr<torch::optim::Optimizer> optimizer);
  torch::nn::Module& module_;
  TrainerConfig config_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
};

}  // namespace shardline::trainer

#endif  // SHARDLINE_TRAINER_LOCAL_BACKEND_H_
