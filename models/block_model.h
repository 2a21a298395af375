// BlockModel: what the built-in architectures (GptModel, models/gpt.h; LlamaModel,
// models/llama.h) share as LanguageModels: a LibTorch module holder `Net` whose
// forward(tokens, runner) runs each "Block" through fsdp::RunUnit, the architecture's `Config`
// (with vocab_size and block_size), and, for a deferred build (models/init.h), the seeded
// initializer that gives each parameter its values later. An architecture adds Create (it checks
// its sizes, then calls Build), its FLOP count and its description.
//
// Thread safety: not thread-safe (see LanguageModel).
#ifndef SHARDLINE_MODELS_BLOCK_MODEL_H_
#define SHARDLINE_MODELS_BLOCK_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "common/status_macros.h"
#include "common/torch_status.h"
#include "models/init.h"
#include "models/language_model.h"

namespace shardline::models {

template <typename Config, typename Net>
class BlockModel : public LanguageModel {
 public:
  at::Tensor Forward(const at::Tensor& tokens) override { return net_->forward(tokens, runner_); }
  torch::nn::Module& module() override { return *net_; }
  std::shared_ptr<torch::nn::Module> module_ptr() override { return net_.ptr(); }
  void set_unit_runner(fsdp::UnitRunner* runner) override { runner_ = runner; }
  const fsdp::ParamInitializer* deferred_init() const override { return init_.get(); }
  std::string block_type() const override { return "Block"; }
  int64_t vocab_size() const override { return config_.vocab_size; }
  int64_t block_size() const override { return config_.block_size; }

 protected:
  BlockModel(const Config& config, Net net, std::unique_ptr<SeededInit> init)
      : config_(config), net_(std::move(net)), init_(std::move(init)) {}

  // Builds the network of `config` (`what` names it in a LibTorch error) and its initial values
  // from `seed` under `rules`: drawn now (kMaterialized) or kept for deferred_init() (kDeferred,
  // the parameters storage-less). `Model` derives from this class and befriends it.
  template <typename Model>
  static absl::StatusOr<std::unique_ptr<Model>> Build(const Config& config, const std::string& what,
                                                      uint64_t seed, InitRules rules,
                                                      InitMode mode) {
    Net net{nullptr};
    RETURN_IF_ERROR(TorchCall(what, [&] { net = Net(config); }));
    auto init = std::make_unique<SeededInit>(*net, seed, std::move(rules));
    if (mode == InitMode::kMaterialized) {
      RETURN_IF_ERROR(MaterializeParameters(*net, *init));
      init.reset();
    }
    return std::unique_ptr<Model>(new Model(config, std::move(net), std::move(init)));
  }

  // Parameter elements as registered (a tied tensor counts where it is registered), for
  // Describe.
  int64_t RegisteredParameterCount() const {
    int64_t n = 0;
    for (const at::Tensor& p : net_->parameters()) n += p.numel();
    return n;
  }

  const Config config_;
  Net net_;

 private:
  fsdp::UnitRunner* runner_ = nullptr;
  std::unique_ptr<SeededInit> init_;  // Null once materialized.
};

}  // namespace shardline::models

#endif  // SHARDLINE_MODELS_BLOCK_MODEL_H_
