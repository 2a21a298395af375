// Deterministic parameter initialisation shared by the built-in models: every rank (and every
// run) builds the same initial weights from ModelSpec.init_seed, whatever the thread count.
//
// GPT-2's scheme: weights ~ N(0, 0.02); residual output projections ~ N(0, 0.02 / sqrt(2 L));
// biases 0; norm weights 1 (biases 0). Parameters are visited in named_parameters() order with
// one CPU generator, so the result depends only on the seed and the architecture.
//
// The models are built with storage-less parameters (fsdp/param_init.h; Storageless below, one
// leaf module at a time). SeededInit produces the values one parameter at a time: either
// MaterializeParameters gives the whole model memory and its values (InitMode::kMaterialized),
// or the FSDP engine copies only this rank's ranges into its shards (kDeferred: sharded
// initialization). Both draw every normal tensor whole, in the same order, from one generator,
// so the values are bit-identical whichever way, at any world size and shard degree.
//
// Thread safety: SeededInit is immutable (ForEach starts its own generator); call
// MaterializeParameters before the module is shared.
#ifndef SHARDLINE_MODELS_INIT_H_
#define SHARDLINE_MODELS_INIT_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <torch/nn/module.h>

#include "absl/status/status.h"
#include "fsdp/param_init.h"

namespace shardline::models {

// How CreateModel leaves the parameters.
enum class InitMode {
  kMaterialized,  // Every parameter holds its initial value (one process, tools, tests).
  kDeferred,      // Storage-less; LanguageModel::deferred_init() produces the values.
};

struct InitRules {
  int n_layer = 1;
  // Name suffixes of residual output projections ("c_proj.weight").
  std::vector<std::string> residual_suffixes;
  // Name fragments of norm layers ("ln_", "norm"); their weights become 1.
  std::vector<std::string> norm_fragments;
};

// The initial values of a module's parameters: normal draws (float32, on the CPU, from one
// generator seeded with `seed`) in named_parameters() order, constants for biases and norms.
class SeededInit : public fsdp::ParamInitializer {
 public:
  // Records the names and shapes of module's parameters (no values are read).
  SeededInit(const torch::nn::Module& module, uint64_t seed, InitRules rules);
  absl::Status ForEach(const Visitor& visit) const override;

 private:
  std::vector<std::pair<std::string, std::vector<int64_t>>> params_;
  uint64_t seed_;
  InitRules rules_;
};

// Gives every (storage-less) parameter of `module` memory on the CPU and its value from `init`,
// one parameter at a time. Errors: RESOURCE_EXHAUSTED when memory runs out; INVALID_ARGUMENT for
// a value of an unknown name or shape.
absl::Status MaterializeParameters(torch::nn::Module& module, const fsdp::ParamInitializer& init);

// Releases the parameters of a just-built module (a leaf: Linear, Embedding, a norm) and returns
// it. Building each leaf through it, a model never holds more than one leaf's parameters.
template <typename ModuleHolder>
ModuleHolder Storageless(ModuleHolder m) {
  fsdp::ReleaseParameterStorage(*m);
  return m;
}

}  // namespace shardline::models

#endif  // SHARDLINE_MODELS_INIT_H_
