// The name and layout of each of our parameters in a Hugging Face checkpoint: one table per
// family (llama_map.cc, gpt2_map.cc). Torch-free.
//
// Layouts (our tensor <-> the file's tensor):
//   kSame         identical.
//   kTransposed   GPT-2's Conv1D stores [in, out]; our Linear is [out, in].
//   kRotaryHalves q/k projections [heads * D, C] (and their biases [heads * D], the q/k norms
//                 [D] with heads 1): HF's rotary (rotate_half) pairs channel i with i + D/2 of
//                 each head; ours (Meta's layout) pairs 2i with 2i + 1. Row 2i + j of our head h
//                 is row j * D/2 + i of the file's head h (convert_llama_weights_to_hf applies
//                 the inverse permutation); verified against transformers' logits by
//                 hf/hf_logits_test.py.
//
// Thread safety: pure functions.
#ifndef SHARDLINE_HF_WEIGHT_MAP_H_
#define SHARDLINE_HF_WEIGHT_MAP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "proto/job_spec.pb.h"

namespace shardline::hf {

enum class Layout { kSame, kTransposed, kRotaryHalves };

struct TensorMapping {
  std::string ours;     // "layers.0.attention.wq.weight"
  std::string hf_name;  // "model.layers.0.self_attn.q_proj.weight"
  Layout layout = Layout::kSame;
  int64_t heads = 0;  // kRotaryHalves: heads in the tensor (n_head for q, n_kv_head for k).
  // Names the file may give instead of hf_name (GPT-2 files saved without "transformer.").
  std::vector<std::string> other_names;
  // Written on export (false: implied by a tie that transformers restores).
  bool exported = true;
};

// The tables, for a resolved spec of the family.
std::vector<TensorMapping> LlamaMapping(const ModelSpec& model);
std::vector<TensorMapping> Gpt2Mapping(const ModelSpec& model);
// The table of model's family; empty for TORCHSCRIPT.
std::vector<TensorMapping> MappingFor(const ModelSpec& model);

// Layout conversion of a row-major float tensor of `shape` (our shape for ToOurs' output and
// FromOurs' input). kTransposed needs 2 dims; kRotaryHalves 2 dims with rows = heads * even D.
std::vector<float> ToOurs(const TensorMapping& m, const std::vector<int64_t>& our_shape,
                          const std::vector<float>& file_values);
std::vector<float> FromOurs(const TensorMapping& m, const std::vector<int64_t>& our_shape,
                            const std::vector<float>& our_values);
// The file's shape of a tensor of our shape.
std::vector<int64_t> FileShape(const TensorMapping& m, const std::vector<int64_t>& our_shape);

}  // namespace shardline::hf

#endif  // SHARDLINE_HF_WEIGHT_MAP_H_
