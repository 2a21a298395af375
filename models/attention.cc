#include "models/attention.h"

#include <cmath>

#include <ATen/ATen.h>

namespace shardline::models {

at::Tensor CausalAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           double dropout_p, AttentionKernel kernel) {
  if (kernel == AttentionKernel::kSdpa) {
    return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, dropout_p,
                                            /*is_causal=*/true);
  }
  const int64_t t = q.size(-2), d = q.size(-1);
  at::Tensor scores =
      at::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(d)));
  // Strictly upper triangle: keys after the query's position.
  const at::Tensor future = at::ones({t, t}, q.options().dtype(at::kBool)).triu(1);
  at::Tensor weights = at::softmax(scores.masked_fill(future, -INFINITY), -1);
  if (dropout_p > 0) weights = at::dropout(weights, dropout_p, /*train=*/true);
  return at::matmul(weights, v);
}

}  // namespace shardline::models
