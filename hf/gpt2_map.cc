// GPT-2: our parameter names (models/gpt.h) <-> transformers' GPT2LMHeadModel. GPT-2's linear
// layers are Conv1D modules storing [in, out]: transposed. Files saved by GPT2Model (the
// original OpenAI upload) name tensors without "transformer."; both are read.
#include "absl/strings/str_cat.h"
#include "hf/weight_map.h"

namespace shardline::hf {
namespace {

TensorMapping Entry(const std::string& ours, const std::string& hf_suffix,
                    Layout layout = Layout::kSame) {
  TensorMapping e{ours, absl::StrCat("transformer.", hf_suffix), layout};
  e.other_names = {hf_suffix};
  return e;
}

}  // namespace

std::vector<TensorMapping> Gpt2Mapping(const ModelSpec& m) {
  std::vector<TensorMapping> t;
  t.push_back(Entry("wte.weight", "wte.weight"));
  t.push_back(Entry("wpe.weight", "wpe.weight"));
  for (int i = 0; i < m.n_layer(); ++i) {
    const std::string ours = absl::StrCat("blocks.", i, ".");
    const std::string hf = absl::StrCat("h.", i, ".");
    for (const char* ln : {"ln_1", "ln_2"}) {
      t.push_back(Entry(absl::StrCat(ours, ln, ".weight"), absl::StrCat(hf, ln, ".weight")));
      t.push_back(Entry(absl::StrCat(ours, ln, ".bias"), absl::StrCat(hf, ln, ".bias")));
    }
    for (const char* linear : {"attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"}) {
      t.push_back(Entry(absl::StrCat(ours, linear, ".weight"), absl::StrCat(hf, linear, ".weight"),
                        Layout::kTransposed));
      t.push_back(Entry(absl::StrCat(ours, linear, ".bias"), absl::StrCat(hf, linear, ".bias")));
    }
  }
  t.push_back(Entry("ln_f.weight", "ln_f.weight"));
  t.push_back(Entry("ln_f.bias", "ln_f.bias"));
  return t;
}

}  // namespace shardline::hf
