// CausalAttention: causal scaled dot-product attention over per-head tensors, the one place the
// GPT and Llama blocks compute it.
//
// kSdpa (the default) calls at::scaled_dot_product_attention(is_causal=true), which picks the
// kernel for the device and dtype: flash or memory-efficient attention on CUDA in bf16/fp16
// (no [T, T] score matrix in memory), the fused CPU flash kernel or the math kernel elsewhere.
// kExplicit is the textbook formula (scores, causal mask, softmax, weighted sum) as separate ops;
// it stays so that tests can check the fused kernels against it (models_test
// SdpaMatchesExplicitAttention) and for debugging.
//
// Thread safety: pure functions.
#ifndef SHARDLINE_MODELS_ATTENTION_H_
#define SHARDLINE_MODELS_ATTENTION_H_

#include <ATen/core/Tensor.h>

#include "models/model_config.h"

namespace shardline::models {

// q, k, v: [B, H, T, D] -> [B, H, T, D]. Position t attends to positions <= t, and with
// sliding_window W > 0 only to those > t - W (W positions, itself included: transformers'
// sliding-window mask). dropout_p is applied to the attention weights (pass 0 in eval mode).
// A window at least T long changes nothing and takes the plain causal kernel.
at::Tensor CausalAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           double dropout_p, AttentionKernel kernel, int64_t sliding_window = 0);

}  // namespace shardline::models

#endif  // SHARDLINE_MODELS_ATTENTION_H_
