#include "models/gpt.h"

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "common/torch_status.h"
#include "models/attention.h"
#include "models/init.h"

namespace shardline::models {
namespace gpt {

CausalSelfAttentionImpl::CausalSelfAttentionImpl(const Config& c)
    : n_head_(c.n_head), dropout_(c.dropout), kernel_(c.attention) {
  c_attn_ = register_module("c_attn", Storageless(torch::nn::Linear(c.n_embd, 3 * c.n_embd)));
  c_proj_ = register_module("c_proj", Storageless(torch::nn::Linear(c.n_embd, c.n_embd)));
  resid_drop_ = register_module("resid_drop", torch::nn::Dropout(c.dropout));
}

at::Tensor CausalSelfAttentionImpl::forward(const at::Tensor& x) {
  const int64_t b = x.size(0), t = x.size(1), c = x.size(2), d = c / n_head_;
  auto qkv = c_attn_->forward(x).split(c, /*dim=*/2);  // 3 x [B, T, C]
  auto heads = [&](const at::Tensor& y) { return y.view({b, t, n_head_, d}).transpose(1, 2); };
  at::Tensor y = CausalAttention(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]),
                                 is_training() ? dropout_ : 0.0, kernel_);  // [B, H, T, D]
  y = y.transpose(1, 2).contiguous().view({b, t, c});
  return resid_drop_->forward(c_proj_->forward(y));
}

MlpImpl::MlpImpl(const Config& c) {
  c_fc_ = register_module("c_fc", Storageless(torch::nn::Linear(c.n_embd, 4 * c.n_embd)));
  c_proj_ = register_module("c_proj", Storageless(torch::nn::Linear(4 * c.n_embd, c.n_embd)));
  drop_ = register_module("drop", torch::nn::Dropout(c.dropout));
}

at::Tensor MlpImpl::forward(const at::Tensor& x) {
  return drop_->forward(c_proj_->forward(at::gelu(c_fc_->forward(x), "tanh")));
}

BlockImpl::BlockImpl(const Config& c) {
  ln_1_ = register_module(
      "ln_1", Storageless(torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.n_embd}))));
  attn_ = register_module("attn", CausalSelfAttention(c));
  ln_2_ = register_module(
      "ln_2", Storageless(torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.n_embd}))));
  mlp_ = register_module("mlp", Mlp(c));
}

at::Tensor BlockImpl::forward(const at::Tensor& x) {
  at::Tensor h = x + attn_->forward(ln_1_->forward(x));
  return h + mlp_->forward(ln_2_->forward(h));
}

GptImpl::GptImpl(const Config& c) : config_(c) {
  wte_ = register_module("wte", Storageless(torch::nn::Embedding(c.vocab_size, c.n_embd)));
  wpe_ = register_module("wpe", Storageless(torch::nn::Embedding(c.block_size, c.n_embd)));
  drop_ = register_module("drop", torch::nn::Dropout(c.dropout));
  blocks_ = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.n_layer; ++i) blocks_->push_back(Block(c));
  ln_f_ = register_module(
      "ln_f", Storageless(torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.n_embd}))));
}

at::Tensor GptImpl::forward(const at::Tensor& tokens, fsdp::UnitRunner* runner) {
  const int64_t t = tokens.size(1);
  TORCH_CHECK(t <= config_.block_size, "sequence length ", t, " exceeds block_size ",
              config_.block_size);
  at::Tensor pos = at::arange(t, tokens.options().dtype(at::kLong));
  at::Tensor x = drop_->forward(wte_->forward(tokens) + wpe_->forward(pos));  // [B, T, C]
  for (size_t i = 0; i < blocks_->size(); ++i) {
    auto block = blocks_->ptr<BlockImpl>(i);
    // By value: with activation checkpointing the engine calls the body again in backward.
    x = fsdp::RunUnit(runner, *block, x,
                      [block](const at::Tensor& h) { return block->forward(h); });
  }
  return at::linear(ln_f_->forward(x), wte_->weight);  // [B, T, V], tied head.
}

}  // namespace gpt

absl::StatusOr<std::unique_ptr<GptModel>> GptModel::Create(const ModelConfig& spec, InitMode mode) {
  const gpt::Config c{spec.n_embd,     spec.n_layer, spec.n_head,   spec.vocab_size,
                      spec.block_size, spec.dropout, spec.attention};
  if (c.n_embd <= 0 || c.n_layer <= 0 || c.n_head <= 0 || c.vocab_size <= 0 || c.block_size <= 0 ||
      c.n_embd % c.n_head != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("model: GPT sizes n_embd ", c.n_embd, ", n_layer ", c.n_layer, ", n_head ",
                     c.n_head, ", vocab_size ", c.vocab_size, ", block_size ", c.block_size,
                     " must be positive with n_embd divisible by n_head"));
  }
  return Build<GptModel>(c, "build the GPT model", spec.init_seed,
                         InitRules{static_cast<int>(c.n_layer), {"c_proj.weight"}, {"ln_"}}, mode);
}

double GptModel::TrainingFlopsPerToken(int64_t seq_len) const {
  const double c = config_.n_embd, l = config_.n_layer;
  const double non_embedding = l * 12 * c * c;
  return 6 * non_embedding + 6 * config_.vocab_size * c + 12 * l * c * seq_len;
}

std::string GptModel::Describe() const {
  return absl::StrFormat("GPT %dx%d, %d heads, vocab %d, block %d: %.2fM parameters",
                         config_.n_layer, config_.n_embd, config_.n_head, config_.vocab_size,
                         config_.block_size, RegisteredParameterCount() / 1e6);
}

}  // namespace shardline::models
