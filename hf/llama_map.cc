// Llama: our parameter names (models/llama.h) <-> transformers' LlamaForCausalLM.
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
    t.push_back({ours + "attention.wq.weight", hf + "self_attn.q_proj.weight",
                 Layout::kRotaryHalves, m.n_head()});
    t.push_back(
        {ours + "attention.wk.weight", hf + "self_attn.k_proj.weight", Layout::kRotaryHalves, kv});
    t.push_back({ours + "attention.wv.weight", hf + "self_attn.v_proj.weight"});
    t.push_back({ours + "attention.wo.weight", hf + "self_attn.o_proj.weight"});
    t.push_back({ours + "ffn_norm.weight", hf + "post_attention_layernorm.weight"});
    t.push_back({ours + "feed_forward.w1.weight", hf + "mlp.gate_proj.weight"});
    t.push_back({ours + "feed_forward.w2.weight", hf + "mlp.down_proj.weight"});
    t.push_back({ours + "feed_forward.w3.weight", hf + "mlp.up_proj.weight"});
  }
  t.push_back({"norm.weight", "model.norm.weight"});
  // A tied checkpoint (tie_word_embeddings) has no lm_head.weight: our untied head starts as a
  // copy of the embedding.
  TensorMapping head{"output.weight", "lm_head.weight"};
  head.fallback = "model.embed_tokens.weight";
  t.push_back(head);
  return t;
}

}  // namespace shardline::hf
