// Deterministic parameter initialisation shared by the built-in models: every rank (and every
// run) builds the same initial weights from ModelSpec.init_seed, whatever the thread count.
//
// GPT-2's scheme: weights ~ N(0, 0.02); residual output projections ~ N(0, 0.02 / sqrt(2 L));
// biases 0; norm weights 1 (biases 0). Parameters are visited in named_parameters() order with
// one CPU generator, so the result depends only on the seed and the architecture.
//
// Thread safety: call before the module is shared.
#ifndef SHARDLINE_MODELS_INIT_H_
#define SHARDLINE_MODELS_INIT_H_

#include <cstdint>
#include <string>
#include <vector>

#include <torch/nn/module.h>

namespace shardline::models {

struct InitRules {
  int n_layer = 1;
  // Name suffixes of residual output projections ("c_proj.weight").
  std::vector<std::string> residual_suffixes;
  // Name fragments of norm layers ("ln_", "norm"); their weights become 1.
  std::vector<std::string> norm_fragments;
};

void InitParameters(torch::nn::Module& module, uint64_t seed, const InitRules& rules);

}  // namespace shardline::models

#endif  // SHARDLINE_MODELS_INIT_H_
