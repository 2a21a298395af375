// GPT: GPT-2 style decoder in the LibTorch C++ frontend.
//
// Dimension legend: B batch, T sequence (<= block_size), C n_embd, H n_head, D = C / H head size,
// V vocab_size, L n_layer.
//
//   x = drop(wte[tokens] + wpe[0..T))                          [B, T, C]
//   L times, each block one FSDP unit (RunUnit):
//     x = x + attn(ln_1(x))     causal self-attention, H heads of size D
//     x = x + mlp(ln_2(x))      C -> 4C (GELU, tanh) -> C
//   logits = ln_f(x) @ wte^T                                    [B, T, V] (head tied to wte)
//
// Parameter names: wte.weight, wpe.weight, blocks.<i>.{ln_1,attn.c_attn,attn.c_proj,ln_2,
// mlp.c_fc,mlp.c_proj}.{weight,bias}, ln_f.{weight,bias}.
//
// Thread safety: not thread-safe (see LanguageModel).
#ifndef SHARDLINE_MODELS_GPT_H_
#define SHARDLINE_MODELS_GPT_H_

#include <memory>
#include <string>

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

#include "absl/status/statusor.h"
#include "models/block_model.h"
#include "models/init.h"
#include "models/language_model.h"
#include "models/model_config.h"

namespace shardline::models {
namespace gpt {

struct Config {
  int64_t n_embd, n_layer, n_head, vocab_size, block_size;
  double dropout;
  AttentionKernel attention = AttentionKernel::kSdpa;
};

class CausalSelfAttentionImpl : public torch::nn::Module {
 public:
  explicit CausalSelfAttentionImpl(const Config& c);
  at::Tensor forward(const at::Tensor& x);  // [B, T, C] -> [B, T, C]

 private:
  int64_t n_head_;
  double dropout_;
  AttentionKernel kernel_;
  torch::nn::Linear c_attn_{nullptr};  // [3C, C] + [3C]: q, k, v projections.
  torch::nn::Linear c_proj_{nullptr};  // [C, C] + [C].
  torch::nn::Dropout resid_drop_{nullptr};
};
TORCH_MODULE(CausalSelfAttention);

class MlpImpl : public torch::nn::Module {
 public:
  explicit MlpImpl(const Config& c);
  at::Tensor forward(const at::Tensor& x);

 private:
  torch::nn::Linear c_fc_{nullptr};    // [4C, C] + [4C].
  torch::nn::Linear c_proj_{nullptr};  // [C, 4C] + [C].
  torch::nn::Dropout drop_{nullptr};
};
TORCH_MODULE(Mlp);

// One transformer block; the FSDP unit of the TRANSFORMER_BLOCK policy (type name "Block").
class BlockImpl : public torch::nn::Module {
 public:
  explicit BlockImpl(const Config& c);
  at::Tensor forward(const at::Tensor& x);

 private:
  torch::nn::LayerNorm ln_1_{nullptr}, ln_2_{nullptr};  // [C] weight + bias each.
  CausalSelfAttention attn_{nullptr};
  Mlp mlp_{nullptr};
};
TORCH_MODULE(Block);

class GptImpl : public torch::nn::Module {
 public:
  explicit GptImpl(const Config& c);
  at::Tensor forward(const at::Tensor& tokens, fsdp::UnitRunner* runner);

 private:
  Config config_;
  torch::nn::Embedding wte_{nullptr};  // [V, C]; also the output head.
  torch::nn::Embedding wpe_{nullptr};  // [block_size, C].
  torch::nn::Dropout drop_{nullptr};
  torch::nn::ModuleList blocks_{nullptr};
  torch::nn::LayerNorm ln_f_{nullptr};
};
TORCH_MODULE(Gpt);

}  // namespace gpt

class GptModel : public BlockModel<gpt::Config, gpt::Gpt> {
 public:
  // `spec` must have resolved sizes (spec::ResolvePreset). Errors: INVALID_ARGUMENT for
  // non-positive sizes or n_embd not divisible by n_head.
  // mode: models/init.h (kDeferred: storage-less parameters, values from deferred_init()).
  static absl::StatusOr<std::unique_ptr<GptModel>> Create(const ModelConfig& spec,
                                                          InitMode mode = InitMode::kMaterialized);

  double TrainingFlopsPerToken(int64_t seq_len) const override;
  std::string Describe() const override;

 private:
  friend class BlockModel<gpt::Config, gpt::Gpt>;  // Build constructs it.
  using BlockModel::BlockModel;
};

}  // namespace shardline::models

#endif  // SHARDLINE_MODELS_GPT_H_
