// TinyGpt: a small GPT-like model for FSDP tests (not the product's model, which lives in
// models/). Token embedding tied to the output head (one parameter, two modules), learned
// positions, n_layer pre-LayerNorm blocks of causal self-attention + MLP, final LayerNorm, and a
// causal-mask buffer (exercises buffer broadcast). Each block runs through fsdp::RunUnit, so the
// engine can gather per block. Default sizes make no unit's parameter count a multiple of 2, 3,
// 4 or 6 except by accident (mlp_hidden = 53).
//
// Shapes: B batch, T sequence (<= block_size), C n_embd, V vocab.
// Thread safety: like any torch::nn::Module.
#ifndef SHARDLINE_FSDP_TESTING_TINY_GPT_H_
#define SHARDLINE_FSDP_TESTING_TINY_GPT_H_

#include <cstdint>

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include "fsdp/unit_runner.h"

namespace shardline::fsdp::testing {

struct TinyGptConfig {
  int64_t vocab = 37;
  int64_t block_size = 8;
  int64_t n_embd = 32;
  int64_t n_head = 4;
  int64_t mlp_hidden = 53;
  int64_t n_layer = 2;
};

class BlockImpl : public torch::nn::Module {
 public:
  explicit BlockImpl(const TinyGptConfig& c);
  at::Tensor forward(const at::Tensor& x, const at::Tensor& mask);  // [B,T,C] -> [B,T,C]

  torch::nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  torch::nn::Linear qkv{nullptr}, proj{nullptr}, fc{nullptr}, fc_proj{nullptr};
  int64_t n_head;
};
TORCH_MODULE(Block);

// Output head sharing the token embedding's weight tensor: [.., C] -> [.., V].
class TiedHeadImpl : public torch::nn::Module {
 public:
  explicit TiedHeadImpl(const at::Tensor& embedding_weight);
  at::Tensor forward(const at::Tensor& x);
  at::Tensor weight;  // [V, C], the same tensor as wte->weight.
};
TORCH_MODULE(TiedHead);

class TinyGptImpl : public torch::nn::Module {
 public:
  explicit TinyGptImpl(const TinyGptConfig& c);
  // idx [B,T] int64 -> logits [B,T,V]. `runner` may be nullptr (unsharded).
  at::Tensor forward(const at::Tensor& idx, UnitRunner* runner);
  // Mean cross-entropy of logits against targets [B,T].
  at::Tensor loss(const at::Tensor& idx, const at::Tensor& targets, UnitRunner* runner);

  TinyGptConfig config;
  torch::nn::Embedding wte{nullptr}, wpe{nullptr};
  torch::nn::ModuleList blocks;
  torch::nn::LayerNorm ln_f{nullptr};
  TiedHead head{nullptr};
  at::Tensor mask;  // [T,T] bool buffer, true above the diagonal.
};
TORCH_MODULE(TinyGpt);

}  // namespace shardline::fsdp::testing

#endif  // SHARDLINE_FSDP_TESTING_TINY_GPT_H_
