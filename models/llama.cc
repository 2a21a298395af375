#include "models/llama.h"

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "common/torch_status.h"
#include "models/attention.h"
#include "models/init.h"

namespace shardline::models {
namespace llama {
namespace {

torch::nn::Linear MakeLinear(int64_t in, int64_t out, bool bias = false) {
  return Storageless(torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(bias)));
}

// Rotates channel pairs (2i, 2i+1) of x [B, H, T, D] by angle t * theta^(-2i/D).
at::Tensor ApplyRotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const auto sizes = x.sizes();
  at::Tensor pairs = x.reshape({sizes[0], sizes[1], sizes[2], sizes[3] / 2, 2});
  at::Tensor a = pairs.select(-1, 0), b = pairs.select(-1, 1);  // [B, H, T, D/2]
  // The angles are float32; under mixed precision x is bf16/fp16 and stays so.
  const at::Tensor c = cos.to(x.scalar_type()), s = sin.to(x.scalar_type());
  at::Tensor ra = a * c - b * s;
  at::Tensor rb = a * s + b * c;
  return at::stack({ra, rb}, -1).reshape(sizes);
}

}  // namespace

RmsNormImpl::RmsNormImpl(int64_t dim, double eps) : eps_(eps) {
  weight_ = register_parameter("weight", at::ones({dim}));
  fsdp::ReleaseParameterStorage(*this);  // The value comes from SeededInit (norm weights: 1).
}

at::Tensor RmsNormImpl::forward(const at::Tensor& x) {
  return x * at::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + eps_) * weight_;
}

AttentionImpl::AttentionImpl(const Config& c)
    : n_head_(c.n_head),
      n_kv_head_(c.n_kv_head > 0 ? c.n_kv_head : c.n_head),
      head_dim_(c.head_dim > 0 ? c.head_dim : c.n_embd / c.n_head),
      sliding_window_(c.sliding_window),
      dropout_(c.dropout),
      kernel_(c.attention) {
  const int64_t q_width = head_dim_ * n_head_, kv_width = head_dim_ * n_kv_head_;
  wq_ = register_module("wq", MakeLinear(c.n_embd, q_width, c.qkv_bias));
  wk_ = register_module("wk", MakeLinear(c.n_embd, kv_width, c.qkv_bias));
  wv_ = register_module("wv", MakeLinear(c.n_embd, kv_width, c.qkv_bias));
  wo_ = register_module("wo", MakeLinear(q_width, c.n_embd, c.out_bias));
  if (c.qk_norm) {
    q_norm_ = register_module("q_norm", RmsNorm(head_dim_, c.norm_eps));
    k_norm_ = register_module("k_norm", RmsNorm(head_dim_, c.norm_eps));
  }
}

at::Tensor AttentionImpl::forward(const at::Tensor& x, const at::Tensor& cos,
                                  const at::Tensor& sin) {
  const int64_t b = x.size(0), t = x.size(1), d = head_dim_;
  // [B, T, n * D] -> [B, n, T, D], each head's channels normed first when qk_norm is set.
  auto heads = [&](const at::Tensor& y, int64_t n, RmsNorm& norm) {
    at::Tensor h = y.view({b, t, n, d});
    if (!norm.is_empty()) h = norm->forward(h);
    return h.transpose(1, 2);
  };
  at::Tensor q = ApplyRotary(heads(wq_->forward(x), n_head_, q_norm_), cos, sin);
  at::Tensor k = ApplyRotary(heads(wk_->forward(x), n_kv_head_, k_norm_), cos, sin);
  RmsNorm none{nullptr};
  at::Tensor v = heads(wv_->forward(x), n_kv_head_, none);
  if (n_kv_head_ != n_head_) {  // Key/value head j serves query heads [j * G, (j + 1) * G).
    k = k.repeat_interleave(n_head_ / n_kv_head_, /*dim=*/1);
    v = v.repeat_interleave(n_head_ / n_kv_head_, /*dim=*/1);
  }
  at::Tensor y = CausalAttention(q, k, v, is_training() ? dropout_ : 0.0, kernel_,
                                 sliding_window_);  // [B, H, T, D]
  return wo_->forward(y.transpose(1, 2).contiguous().view({b, t, n_head_ * d}));
}

FeedForwardImpl::FeedForwardImpl(const Config& c) {
  w1_ = register_module("w1", MakeLinear(c.n_embd, c.ffn_hidden));
  w2_ = register_module("w2", MakeLinear(c.ffn_hidden, c.n_embd));
  w3_ = register_module("w3", MakeLinear(c.n_embd, c.ffn_hidden));
}

at::Tensor FeedForwardImpl::forward(const at::Tensor& x) {
  return w2_->forward(at::silu(w1_->forward(x)) * w3_->forward(x));
}

BlockImpl::BlockImpl(const Config& c) {
  attention_norm_ = register_module("attention_norm", RmsNorm(c.n_embd, c.norm_eps));
  attention_ = register_module("attention", Attention(c));
  ffn_norm_ = register_module("ffn_norm", RmsNorm(c.n_embd, c.norm_eps));
  feed_forward_ = register_module("feed_forward", FeedForward(c));
  drop_ = register_module("drop", torch::nn::Dropout(c.dropout));
}

at::Tensor BlockImpl::forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  at::Tensor h = x + drop_->forward(attention_->forward(attention_norm_->forward(x), cos, sin));
  return h + drop_->forward(feed_forward_->forward(ffn_norm_->forward(h)));
}

LlamaImpl::LlamaImpl(const Config& c) : config_(c) {
  tok_embeddings_ =
      register_module("tok_embeddings", Storageless(torch::nn::Embedding(c.vocab_size, c.n_embd)));
  drop_ = register_module("drop", torch::nn::Dropout(c.dropout));
  layers_ = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.n_layer; ++i) layers_->push_back(Block(c));
  norm_ = register_module("norm", RmsNorm(c.n_embd, c.norm_eps));
  // Tied: the head is tok_embeddings' weight, one parameter in the root unit (as GPT's).
  if (!c.tie_embeddings) output_ = register_module("output", MakeLinear(c.n_embd, c.vocab_size));
}

at::Tensor LlamaImpl::forward(const at::Tensor& tokens, fsdp::UnitRunner* runner) {
  const int64_t t = tokens.size(1);
  TORCH_CHECK(t <= config_.block_size, "sequence length ", t, " exceeds block_size ",
              config_.block_size);
  if (!cos_.defined() || cos_.device() != tokens.device()) {
    const std::vector<double> freqs =
        spec::RotaryInverseFrequencies(config_.head_dim, config_.rope_theta, config_.rope_scaling);
    at::Tensor inv = at::tensor(freqs, at::kDouble);
    at::Tensor angles = at::outer(at::arange(config_.block_size, at::kDouble), inv);
    cos_ = angles.cos().to(tokens.device(), at::kFloat);
    sin_ = angles.sin().to(tokens.device(), at::kFloat);
  }
  at::Tensor cos = cos_.narrow(0, 0, t), sin = sin_.narrow(0, 0, t);  // [T, D/2]
  at::Tensor x = drop_->forward(tok_embeddings_->forward(tokens));
  for (size_t i = 0; i < layers_->size(); ++i) {
    auto block = layers_->ptr<BlockImpl>(i);
    x = fsdp::RunUnit(runner, *block, x, [block, cos, sin](const at::Tensor& h) {
      return block->forward(h, cos, sin);
    });
  }
  at::Tensor h = norm_->forward(x);
  return output_.is_empty() ? at::linear(h, tok_embeddings_->weight) : output_->forward(h);
}

}  // namespace llama

absl::StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::Create(const ModelConfig& spec,
                                                               InitMode mode) {
  llama::Config c{spec.n_embd,     spec.n_layer,    spec.n_head, spec.vocab_size,
                  spec.block_size, spec.ffn_hidden, spec.dropout};
  c.attention = spec.attention;
  c.n_kv_head = spec.n_kv_head > 0 ? spec.n_kv_head : spec.n_head;
  c.rope_theta = spec.rope_theta;
  c.norm_eps = spec.norm_eps;
  c.head_dim =
      spec.head_dim > 0 ? spec.head_dim : (spec.n_head > 0 ? spec.n_embd / spec.n_head : 0);
  c.qkv_bias = spec.attention_qkv_bias;
  c.out_bias = spec.attention_out_bias;
  c.qk_norm = spec.qk_norm;
  c.tie_embeddings = spec.tie_embeddings;
  c.rope_scaling = spec.rope_scaling;
  c.sliding_window = spec.sliding_window;
  // Without an explicit head_dim the width must split into heads evenly.
  const bool heads_split = spec.head_dim > 0 || (c.n_head > 0 && c.n_embd % c.n_head == 0);
  if (c.n_embd <= 0 || c.n_layer <= 0 || c.n_head <= 0 || c.vocab_size <= 0 || c.block_size <= 0 ||
      c.ffn_hidden <= 0 || !heads_split || c.head_dim <= 0 || c.head_dim % 2 != 0 ||
      c.n_kv_head <= 0 || c.n_head % c.n_kv_head != 0 || !(c.rope_theta > 0) || !(c.norm_eps > 0) ||
      c.sliding_window < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model: LLAMA sizes n_embd ", c.n_embd, ", n_layer ", c.n_layer, ", n_head ", c.n_head,
        ", n_kv_head ", c.n_kv_head, ", head_dim ", c.head_dim, ", vocab_size ", c.vocab_size,
        ", block_size ", c.block_size, ", ffn_hidden ", c.ffn_hidden, ", rope_theta ", c.rope_theta,
        ", norm_eps ", c.norm_eps, ", sliding_window ", c.sliding_window,
        " must be positive (sliding_window 0 for none) with an even head size (n_embd / n_head "
        "unless head_dim is set) and n_kv_head dividing n_head"));
  }
  RETURN_IF_ERROR(spec::ValidateRopeScaling(c.rope_scaling));
  return Build<LlamaModel>(
      c, "build the Llama model", spec.init_seed,
      InitRules{static_cast<int>(c.n_layer), {"wo.weight", "w2.weight"}, {"norm."}}, mode);
}

double LlamaModel::TrainingFlopsPerToken(int64_t seq_len) const {
  const double c = config_.n_embd, l = config_.n_layer, f = config_.ffn_hidden;
  const double q = static_cast<double>(config_.head_dim) * config_.n_head;  // Query width H * D.
  const double kv = static_cast<double>(config_.head_dim) * config_.n_kv_head;
  // Matmul FLOPs (forward + backward = 3 x 2 per weight) and the attention scores over T.
  return 6 * (l * (2 * c * q + 2 * c * kv + 3 * c * f) + config_.vocab_size * c) +
         12 * l * q * seq_len;
}

std::string LlamaModel::Describe() const {
  return absl::StrFormat(
      "Llama %dx%d, %d heads of %d (%d kv), ffn %d, vocab %d, block %d%s%s%s%s%s: %.2fM "
      "parameters",
      config_.n_layer, config_.n_embd, config_.n_head, config_.head_dim, config_.n_kv_head,
      config_.ffn_hidden, config_.vocab_size, config_.block_size,
      config_.qkv_bias ? ", qkv bias" : "", config_.qk_norm ? ", qk norm" : "",
      config_.tie_embeddings ? ", tied head" : "",
      config_.rope_scaling.type == spec::RotaryScaling::Type::kNone ? "" : ", scaled rope",
      config_.sliding_window > 0 ? absl::StrCat(", window ", config_.sliding_window) : "",
      RegisteredParameterCount() / 1e6);
}

}  // namespace shardline::models
