// Llama-style decoder in the LibTorch C++ frontend.
//
// Dimension legend: B batch, T sequence (<= block_size), C n_embd, H n_head, D head_dim (C / H
// unless set; even: rotary pairs), KV n_kv_head, F ffn_hidden, V vocab_size, L n_layer.
//
//   x = drop(tok_embeddings[tokens])                                   [B, T, C]
//   L times, each block one FSDP unit (RunUnit):
//     x = x + wo(attn(rope(qn(wq(n))), rope(kn(wk(n))), wv(n)))   n = attention_norm(x) (RMSNorm)
//         wq: C -> H * D, wk, wv: C -> KV * D, wo: H * D -> C; grouped-query attention: each of
//         the KV key/value heads serves H / KV query heads (KV = H: ordinary multi-head)
//         qn, kn: identity, or with qk_norm an RMSNorm over each head's D channels (Qwen3)
//         biases on wq/wk/wv (attention_qkv_bias: Qwen2) and wo (attention_out_bias) if set
//         attn: causal; with sliding_window W, position t sees positions (t - W, t] (Mistral)
//     x = x + w2(silu(w1(m)) * w3(m))                     m = ffn_norm(x), SwiGLU C -> F -> C
//   logits = output(norm(x))                                           [B, T, V]
//         output is its own [V, C] parameter, or with tie_embeddings tok_embeddings' weight.
//
// Rotary embedding: channel pairs (2i, 2i+1) of each head rotate by t * inv_freq[i]
// (spec/rope.h: rope_theta^(-2i/D), with rope_scaling's long-context scaling), Meta's layout;
// hf/weight_map.h converts Hugging Face's half-split layout. Rotary tables (cos/sin, [block_size,
// D/2]) are plain tensors, not parameters or buffers, so the FSDP engine never shards them; they
// follow the input's device.
//
// Thread safety: not thread-safe (see LanguageModel).
#ifndef SHARDLINE_MODELS_LLAMA_H_
#define SHARDLINE_MODELS_LLAMA_H_

#include <memory>
#include <string>

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "absl/status/statusor.h"
#include "models/block_model.h"
#include "models/init.h"
#include "models/language_model.h"
#include "models/model_config.h"
#include "spec/rope.h"

namespace shardline::models {
namespace llama {

struct Config {
  int64_t n_embd, n_layer, n_head, vocab_size, block_size, ffn_hidden;
  double dropout;
  int64_t n_kv_head = 0;  // 0: n_head.
  double rope_theta = 10000.0;
  double norm_eps = 1e-5;
  int64_t head_dim = 0;  // 0: n_embd / n_head.
  bool qkv_bias = false, out_bias = false, qk_norm = false, tie_embeddings = false;
  spec::RotaryScaling rope_scaling;
  int64_t sliding_window = 0;  // 0: none.
  AttentionKernel attention = AttentionKernel::kSdpa;
};

class RmsNormImpl : public torch::nn::Module {
 public:
  RmsNormImpl(int64_t dim, double eps);
  at::Tensor forward(const at::Tensor& x);

 private:
  double eps_;
  at::Tensor weight_;  // [C], initialised to 1.
};
TORCH_MODULE(RmsNorm);

class AttentionImpl : public torch::nn::Module {
 public:
  explicit AttentionImpl(const Config& c);
  // cos, sin: [T, D/2].
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

 private:
  int64_t n_head_, n_kv_head_, head_dim_, sliding_window_;
  double dropout_;
  AttentionKernel kernel_;
  torch::nn::Linear wq_{nullptr};                // [H * D, C].
  torch::nn::Linear wk_{nullptr}, wv_{nullptr};  // [KV * D, C]: KV = n_kv_head key/value heads.
  torch::nn::Linear wo_{nullptr};                // [C, H * D].
  RmsNorm q_norm_{nullptr}, k_norm_{nullptr};    // [D] each, with qk_norm only.
};
TORCH_MODULE(Attention);

class FeedForwardImpl : public torch::nn::Module {
 public:
  explicit FeedForwardImpl(const Config& c);
  at::Tensor forward(const at::Tensor& x);

 private:
  torch::nn::Linear w1_{nullptr}, w3_{nullptr};  // [F, C] gate and up.
  torch::nn::Linear w2_{nullptr};                // [C, F] down.
};
TORCH_MODULE(FeedForward);

// One transformer block; type name "Block" like GPT's.
class BlockImpl : public torch::nn::Module {
 public:
  explicit BlockImpl(const Config& c);
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

 private:
  RmsNorm attention_norm_{nullptr}, ffn_norm_{nullptr};
  Attention attention_{nullptr};
  FeedForward feed_forward_{nullptr};
  torch::nn::Dropout drop_{nullptr};
};
TORCH_MODULE(Block);

class LlamaImpl : public torch::nn::Module {
 public:
  explicit LlamaImpl(const Config& c);
  at::Tensor forward(const at::Tensor& tokens, fsdp::UnitRunner* runner);

 private:
  Config config_;
  torch::nn::Embedding tok_embeddings_{nullptr};  // [V, C].
  torch::nn::Dropout drop_{nullptr};
  torch::nn::ModuleList layers_{nullptr};
  RmsNorm norm_{nullptr};
  torch::nn::Linear output_{nullptr};  // [V, C]; none with tie_embeddings.
  at::Tensor cos_, sin_;               // [block_size, D/2] on the last forward's device.
};
TORCH_MODULE(Llama);

}  // namespace llama

class LlamaModel : public BlockModel<llama::Config, llama::Llama> {
 public:
  // `spec` must have resolved sizes (ffn_hidden filled). Errors: INVALID_ARGUMENT for bad sizes.
  // mode: models/init.h (kDeferred: storage-less parameters, values from deferred_init()).
  static absl::StatusOr<std::unique_ptr<LlamaModel>> Create(
      const ModelConfig& spec, InitMode mode = InitMode::kMaterialized);

  double TrainingFlopsPerToken(int64_t seq_len) const override;
  std::string Describe() const override;

 private:
  friend class BlockModel<llama::Config, llama::Llama>;  // Build constructs it.
  using BlockModel::BlockModel;
};

}  // namespace shardline::models

#endif  // SHARDLINE_MODELS_LLAMA_H_
