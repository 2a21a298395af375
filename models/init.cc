#include "models/init.h"

#include <cmath>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/autograd/grad_mode.h>

#include "absl/strings/match.h"

namespace shardline::models {

void InitParameters(torch::nn::Module& module, uint64_t seed, const InitRules& rules) {
  torch::NoGradGuard no_grad;
  at::Generator gen = at::detail::createCPUGenerator(seed);
  const double residual_std = 0.02 / std::sqrt(2.0 * rules.n_layer);
  for (auto& item : module.named_parameters(/*recurse=*/true)) {
    const std::string& name = item.key();
    at::Tensor& p = item.value();
    bool is_norm = false;
    for (const std::string& f : rules.norm_fragments) is_norm |= absl::StrContains(name, f);
    if (absl::EndsWith(name, ".bias")) {
      p.zero_();
    } else if (is_norm) {
      p.fill_(1.0);
    } else {
      bool residual = false;
      for (const std::string& s : rules.residual_suffixes) residual |= absl::EndsWith(name, s);
      // Drawn on CPU with the seeded generator, then copied: same values on any device.
      at::Tensor values = at::empty(p.sizes(), at::TensorOptions().dtype(at::kFloat));
      values.normal_(0.0, residual ? residual_std : 0.02, gen);
      p.copy_(values);
    }
  }
}

}  // namespace shardline::models
