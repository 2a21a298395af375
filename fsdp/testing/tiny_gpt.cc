#include "fsdp/testing/tiny_gpt.h"

#include <cmath>
#include <limits>

#include <ATen/ATen.h>

namespace shardline::fsdp::testing {

BlockImpl::BlockImpl(const TinyGptConfig& c) : torch::nn::Module("Block"), n_head(c.n_head) {
  ln1 = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.n_embd})));
  // No bias: a key bias has an exactly-zero gradient (softmax is shift-invariant), and AdamW
  // turns its rounding noise into full-size updates whose sign depends on summation order.
  qkv = register_module(
      "qkv", torch::nn::Linear(torch::nn::LinearOptions(c.n_embd, 3 * c.n_embd).bias(false)));
  proj = register_module("proj", torch::nn::Linear(c.n_embd, c.n_embd));
  ln2 = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.n_embd})));
  fc = register_module("fc", torch::nn::Linear(c.n_embd, c.mlp_hidden));
  fc_proj = register_module("fc_proj", torch::nn::Linear(c.mlp_hidden, c.n_embd));
}

at::Tensor BlockImpl::forward(const at::Tensor& x, const at::Tensor& mask) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), hd = C / n_head;
  at::Tensor h = ln1->forward(x);
  auto parts = qkv->forward(h).split(C, /*dim=*/2);
  auto heads = [&](const at::Tensor& t) { return t.view({B, T, n_head, hd}).transpose(1, 2); };
  at::Tensor q = heads(parts[0]), k = heads(parts[1]), v = heads(parts[2]);
  at::Tensor att = at::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(hd)));
  att = att.masked_fill(mask.narrow(0, 0, T).narrow(1, 0, T),
                        -std::numeric_limits<double>::infinity());  // -inf: fits fp16 too.
  att = at::softmax(att, -1);
  at::Tensor y = at::matmul(att, v).transpose(1, 2).contiguous().view({B, T, C});
  at::Tensor out = x + proj->forward(y);
  return out + fc_proj->forward(at::gelu(fc->forward(ln2->forward(out))));
}

TiedHeadImpl::TiedHeadImpl(const at::Tensor& embedding_weight) : torch::nn::Module("TiedHead") {
  weight = register_parameter("weight", embedding_weight);
}

at::Tensor TiedHeadImpl::forward(const at::Tensor& x) { return at::linear(x, weight); }

TinyGptImpl::TinyGptImpl(const TinyGptConfig& c) : torch::nn::Module("TinyGpt"), config(c) {
  wte = register_module("wte", torch::nn::Embedding(c.vocab, c.n_embd));
  wpe = register_module("wpe", torch::nn::Embedding(c.block_size, c.n_embd));
  blocks = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.n_layer; ++i) blocks->push_back(Block(c));
  ln_f = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.n_embd})));
  head = register_module("head", TiedHead(wte->weight));
  mask = register_buffer("mask",
                         at::ones({c.block_size, c.block_size}, at::kBool).triu(/*diagonal=*/1));
}

at::Tensor TinyGptImpl::forward(const at::Tensor& idx, UnitRunner* runner) {
  const int64_t T = idx.size(1);
  at::Tensor pos = at::arange(T, idx.options());
  at::Tensor x = wte->forward(idx) + wpe->forward(pos).unsqueeze(0);
  for (size_t i = 0; i < blocks->size(); ++i) {
    auto block = blocks->ptr<BlockImpl>(i);
    x = RunUnit(runner, *block, x,
                [block, mask = mask](const at::Tensor& h) { return block->forward(h, mask); });
  }
  return head->forward(ln_f->forward(x));
}

at::Tensor TinyGptImpl::loss(const at::Tensor& idx, const at::Tensor& targets, UnitRunner* runner) {
  at::Tensor logits = forward(idx, runner).to(at::kFloat);  // The loss in fp32 (mixed precision).
  return at::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}));
}

}  // namespace shardline::fsdp::testing
