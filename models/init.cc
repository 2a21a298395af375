#include "models/init.h"

#include <cmath>
#include <map>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/autograd/grad_mode.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/torch_status.h"

namespace shardline::models {

SeededInit::SeededInit(const torch::nn::Module& module, uint64_t seed, InitRules rules)
    : seed_(seed), rules_(std::move(rules)) {
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    params_.emplace_back(item.key(), item.value().sizes().vec());
  }
}

absl::Status SeededInit::ForEach(const Visitor& visit) const {
  at::Generator gen = at::detail::createCPUGenerator(seed_);
  const double residual_std = 0.02 / std::sqrt(2.0 * rules_.n_layer);
  for (const auto& [name, shape] : params_) {
    bool is_norm = false;
    for (const std::string& f : rules_.norm_fragments) is_norm |= absl::StrContains(name, f);
    absl::Status s;
    if (absl::EndsWith(name, ".bias")) {
      s = visit(name, fsdp::InitialValue::Fill(shape, 0.0));
    } else if (is_norm) {
      s = visit(name, fsdp::InitialValue::Fill(shape, 1.0));
    } else {
      bool residual = false;
      for (const std::string& r : rules_.residual_suffixes) residual |= absl::EndsWith(name, r);
      // The whole tensor from the one generator, as the unsharded initialisation always drew it:
      // the values (and the generator's state after them) depend on the tensor's size.
      at::Tensor values;
      RETURN_IF_ERROR(TorchCall("draw initial values", [&] {
        values = at::empty(shape, at::TensorOptions().dtype(at::kFloat));
        values.normal_(0.0, residual ? residual_std : 0.02, gen);
      }));
      s = visit(name, fsdp::InitialValue::Values(std::move(values)));
    }
    RETURN_IF_ERROR(s);
  }
  return absl::OkStatus();
}

absl::Status MaterializeParameters(torch::nn::Module& module, const fsdp::ParamInitializer& init) {
  std::map<std::string, at::Tensor> by_name;
  for (auto& item : module.named_parameters(/*recurse=*/true)) by_name[item.key()] = item.value();
  return init.ForEach([&](const std::string& name, const fsdp::InitialValue& value) {
    auto it = by_name.find(name);
    if (it == by_name.end() || it->second.sizes().vec() != value.shape()) {
      return absl::InvalidArgumentError(
          absl::StrCat("initial value of ", name, ": no parameter of that name and shape"));
    }
    at::Tensor& p = it->second;
    return TorchCall(absl::StrCat("materialize ", name), [&] {
      torch::NoGradGuard no_grad;
      if (fsdp::IsStorageless(p)) p.set_data(at::empty(p.sizes(), p.options()));
      value.CopyRange(0, value.numel(), p.detach().view({-1}));
    });
  });
}

}  // namespace shardline::models
