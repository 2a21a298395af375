#include "models/attention.h"

#include <cmath>

#include <ATen/ATen.h>

namespace shardline::models {

at::Tensor CausalAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           double dropout_p, AttentionKernel kernel, int64_t sliding_window) {
  const int64_t t = q.size(-2), d = q.size(-1);
  const bool windowed = sliding_window > 0 && sliding_window < t;
  // Hidden keys, [T, T] (true: masked): after the query's position (strictly upper triangle),
  // and with a window those W or more positions before it (on or below diagonal -W).
  at::Tensor hidden;
  if (windowed || kernel == AttentionKernel::kExplicit) {
    const at::Tensor ones = at::ones({t, t}, q.options().dtype(at::kBool));
    hidden = ones.triu(1);
    if (windowed) hidden = hidden.logical_or(ones.tril(-sliding_window));
  }
  if (kernel == AttentionKernel::kSdpa) {
    if (!windowed) {
      return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, dropout_p,
                                              /*is_causal=*/true);
    }
    // SDPA's boolean mask is true where attention is allowed.
    return at::scaled_dot_product_attention(q, k, v, hidden.logical_not(), dropout_p,
                                            /*is_causal=*/false);
  }
  at::Tensor scores =
      at::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(d)));
  at::Tensor weights = at::softmax(scores.masked_fill(hidden, -INFINITY), -1);
  if (dropout_p > 0) weights = at::dropout(weights, dropout_p, /*train=*/true);
  return at::matmul(weights, v);
}

}  // namespace shardline::models
