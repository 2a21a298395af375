#include "trainer/local_backend.h"

#include <cmath>
#include <set>
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include "absl/strings/str_cat.h"
#include "common/torch_status.h"

namespace shardline::trainer {
namespace {

// Each parameter once: a tied tensor registered under two modules (a TorchScript model's tied
// embedding and head, mirrored under both names) would otherwise be stepped and clipped twice.
std::vector<at::Tensor> UniqueParameters(const torch::nn::Module& module) {
  std::vector<at::Tensor> out;
  std::set<const c10::TensorImpl*> seen;
  for (const at::Tensor& p : module.parameters()) {
    if (seen.insert(p.unsafeGetTensorImpl()).second) out.push_back(p);
  }
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<LocalBackend>> LocalBackend::Create(torch::nn::Module& module,
                                                                   const TrainerConfig& c) {
  if (c.layout.world_size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("the local backend runs one process; world_size is ", c.layout.world_size()));
  }
  std::unique_ptr<torch::optim::Optimizer> opt;
  if (c.optimizer == OptimizerKind::kAdamW) {
    opt = std::make_unique<torch::optim::AdamW>(UniqueParameters(module),
                                                torch::optim::AdamWOptions(c.lr)
                                                    .betas({c.beta1, c.beta2})
                                                    .eps(c.eps)
                                                    .weight_decay(c.weight_decay));
  } else {
    opt = std::make_unique<torch::optim::SGD>(
        UniqueParameters(module),
        torch::optim::SGDOptions(c.lr).momentum(c.momentum).weight_decay(c.weight_decay));
  }
  return std::unique_ptr<LocalBackend>(new LocalBackend(module, c, std::move(opt)));
}

LocalBackend::LocalBackend(torch::nn::Module& module, const TrainerConfig& config,
                           std::unique_ptr<torch::optim::Optimizer> optimizer)
    : module_(module), config_(config), optimizer_(std::move(optimizer)) {}

std::string LocalBackend::Describe() const {
  return absl::StrCat("single process, torch::optim::",
                      config_.optimizer == OptimizerKind::kAdamW ? "AdamW" : "SGD");
}

absl::Status LocalBackend::Backward(const at::Tensor& loss, bool /*sync*/) {
  return TorchCall("backward", [&] { loss.backward(); });
}

absl::StatusOr<double> LocalBackend::Step(double lr) {
  return TorchTry("optimizer step", [&] {
    std::vector<at::Tensor> params = UniqueParameters(module_);
    double norm = 0;
    if (config_.grad_clip > 0) {
      norm = torch::nn::utils::clip_grad_norm_(params, config_.grad_clip);
    } else {
      double sq = 0;
      for (const at::Tensor& p : params) {
        if (p.grad().defined()) sq += p.grad().pow(2).sum().item<double>();
      }
      norm = std::sqrt(sq);
    }
    for (auto& group : optimizer_->param_groups()) group.options().set_lr(lr);
    optimizer_->step();
    optimizer_->zero_grad();
    return norm;
  });
}

int64_t LocalBackend::StateBytes() const {
  int64_t bytes = 0;
  for (const at::Tensor& p : UniqueParameters(module_)) bytes += p.numel() * 4;
  const int64_t per_param = config_.optimizer == OptimizerKind::kAdamW ? 3 : 2;  // grad + state.
  return bytes * (1 + per_param);
}

}  // namespace shardline::trainer
