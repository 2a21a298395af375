// The Llama family (llama, qwen2, qwen3, mistral): our parameter names (models/llama.h) <->
// transformers' LlamaForCausalLM / Qwen2ForCausalLM / Qwen3ForCausalLM / MistralForCausalLM,
// which share these names.
#include "absl/strings/str_cat.h"
#include "hf/weight_map.h"

namespace shardline::hf {

std::vector<TensorMapping> LlamaMapping(const ModelSpec& m) {
  const int64_t kv = m.n_kv_head() > 0 ? m.n_kv_head() : m.n_head();
  std::vector<TensorMapping> t;
  t.push_back({"tok_embeddings.weight", "model.embed_tokens.weight"});
  for (int i = 0; i < m.n_layer(); ++i) {
    const std::string ours = absl::StrCat("layers.", i, ".");
    const std::string hf = absl::StrCat("model.layers.", i, ".");
    t.push_back({ours + "attention_norm.weight", hf + "input_layernorm.weight"});
    // q and k rows (and their biases, and the q/k norms' channels) are permuted between
    // the rotary layouts; v and o are not rotated.
    t.push_back({ours + "attention.wq.weight", hf + "self_attn.q_proj.weight",
                 Layout::kRotaryHalves, m.n_head()});
    t.push_back(
        {ours + "attention.wk.weight", hf + "self_attn.k_proj.weight", Layout::kRotaryHalves, kv});
    t.push_back({ours + "attention.wv.weight", hf + "self_attn.v_proj.weight"});
    t.push_back({ours + "attention.wo.weight", hf + "self_attn.o_proj.weight"});
    if (m.attention_qkv_bias()) {
      t.push_back({ours + "attention.wq.bias", hf + "self_attn.q_proj.bias", Layout::kRotaryHalves,
                   m.n_head()});
      t.push_back(
          {ours + "attention.wk.bias", hf + "self_attn.k_proj.bias", Layout::kRotaryHalves, kv});
      t.push_back({ours + "attention.wv.bias", hf + "self_attn.v_proj.bias"});
    }
    if (m.attention_out_bias()) {
      t.push_back({ours + "attention.wo.bias", hf + "self_attn.o_proj.bias"});
    }
    if (m.qk_norm()) {  // One head's channels: [D].
      t.push_back({ours + "attention.q_norm.weight", hf + "self_attn.q_norm.weight",
                   Layout::kRotaryHalves, 1});
      t.push_back({ours + "attention.k_norm.weight", hf + "self_attn.k_norm.weight",
                   Layout::kRotaryHalves, 1});
    }
    t.push_back({ours + "ffn_norm.weight", hf + "post_attention_layernorm.weight"});
    t.push_back({ours + "feed_forward.w1.weight", hf + "mlp.gate_proj.weight"});
    t.push_back({ours + "feed_forward.w2.weight", hf + "mlp.down_proj.weight"});
    t.push_back({ours + "feed_forward.w3.weight", hf + "mlp.up_proj.weight"});
  }
  t.push_back({"norm.weight", "model.norm.weight"});
  // Tied (tie_word_embeddings): the head is the embedding; save_pretrained writes no
  // lm_head.weight and from_pretrained ties it again.
  if (!m.tie_embeddings()) t.push_back({"output.weight", "lm_head.weight"});
  return t;
}

}  // namespace shardline::hf
