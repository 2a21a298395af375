#include "spec/model_presets.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace shardline::spec {
namespace {

struct Preset {
  const char* name;
  ModelSpec::Architecture arch;
  int n_embd, n_layer, n_head, vocab, block;
};

constexpr Preset kPresets[] = {
    {"tiny", ModelSpec::GPT, 64, 4, 4, 256, 64},
    {"small", ModelSpec::GPT, 256, 6, 8, 256, 256},
    {"gpt2", ModelSpec::GPT, 768, 12, 12, 50257, 1024},
    {"llama-tiny", ModelSpec::LLAMA, 64, 4, 4, 256, 64},
};

void FillIfZero(int32_t value, int32_t (ModelSpec::*get)() const, void (ModelSpec::*set)(int32_t),
                ModelSpec* m) {
  if ((m->*get)() == 0) (m->*set)(value);
}

}  // namespace

std::vector<std::string> PresetNames() {
  std::vector<std::string> names;
  for (const Preset& p : kPresets) names.push_back(p.name);
  return names;
}

absl::Status ResolvePreset(ModelSpec* m) {
  if (!m->preset().empty()) {
    const Preset* found = nullptr;
    for (const Preset& p : kPresets) {
      if (m->preset() == p.name) found = &p;
    }
    if (found == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("model.preset: \"", m->preset(),
                                                     "\" is not one of ",
                                                     absl::StrJoin(PresetNames(), ", ")));
    }
    if (m->architecture() == ModelSpec::ARCHITECTURE_UNSPECIFIED) {
      m->set_architecture(found->arch);
    }
    FillIfZero(found->n_embd, &ModelSpec::n_embd, &ModelSpec::set_n_embd, m);
    FillIfZero(found->n_layer, &ModelSpec::n_layer, &ModelSpec::set_n_layer, m);
    FillIfZero(found->n_head, &ModelSpec::n_head, &ModelSpec::set_n_head, m);
    FillIfZero(found->vocab, &ModelSpec::vocab_size, &ModelSpec::set_vocab_size, m);
    FillIfZero(found->block, &ModelSpec::block_size, &ModelSpec::set_block_size, m);
  }
  if (m->architecture() == ModelSpec::LLAMA && m->ffn_hidden() == 0 && m->n_embd() > 0) {
    const int64_t raw = (8LL * m->n_embd() + 2) / 3;
    m->set_ffn_hidden(static_cast<int32_t>((raw + 31) / 32 * 32));
  }
  return absl::OkStatus();
}

int64_t CountParameters(const ModelSpec& m) {
  const int64_t d = m.n_embd(), l = m.n_layer(), v = m.vocab_size(), t = m.block_size();
  switch (m.architecture()) {
    case ModelSpec::GPT:
      // wte + wpe + per block (2 LayerNorms, qkv, proj, fc, fc proj, with biases) + ln_f;
      // the head is tied to wte.
      return v * d + t * d +
             l * (4 * d + 3 * d * d + 3 * d + d * d + d + 4 * d * d + 4 * d + 4 * d * d + d) +
             2 * d;
    case ModelSpec::LLAMA: {
      const int64_t h = m.ffn_hidden();
      const int64_t heads = m.n_head() > 0 ? m.n_head() : 1;
      const int64_t head_dim = m.head_dim() > 0 ? m.head_dim() : d / heads;
      const int64_t q = head_dim * heads;  // Query width.
      // Key/value width: n_kv_head heads of head_dim (grouped-query attention).
      const int64_t kv = head_dim * (m.n_kv_head() > 0 ? m.n_kv_head() : heads);
      // Per block: 2 RMSNorms, q/o, k/v, w1/w2/w3, and the optional q/k/v and output biases
      // and q/k norms.
      const int64_t block = 2 * d + 2 * d * q + 2 * d * kv + 3 * d * h +
                            (m.attention_qkv_bias() ? q + 2 * kv : 0) +
                            (m.attention_out_bias() ? d : 0) + (m.qk_norm() ? 2 * head_dim : 0);
      // tok embeddings + blocks + norm + the head unless tied to the embeddings.
      return v * d + l * block + d + (m.tie_embeddings() ? 0 : v * d);
    }
    default:
      return 0;
  }
}

}  // namespace shardline::spec
