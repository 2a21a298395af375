// Rotary position embeddings: the inverse frequencies of a head's channel pairs, with the
// long-context scalings Hugging Face configs name (rope_parameters / rope_scaling). The one
// definition of these formulas; transformers' modeling_rope_utils.py defines the same ones.
//
// Pair i of a head of size D rotates by angle t * inv_freq[i] at position t, with
//   inv_freq[i] = theta^(-2i / D)                                   (kNone, kDynamic)
//   inv_freq[i] / factor                                            (kLinear)
//   Llama 3.1 (kLlama3), by wavelength w = 2 pi / inv_freq[i] and L = original context:
//     w < L / high_freq_factor:   inv_freq[i]                       (high frequencies kept)
//     w > L / low_freq_factor:    inv_freq[i] / factor              (low frequencies scaled)
//     between: (1 - s) inv_freq[i] / factor + s inv_freq[i],
//              s = (L / w - low_freq_factor) / (high_freq_factor - low_freq_factor)
// kDynamic (NTK) changes the base only for sequences longer than max_position_embeddings, which
// Shardline never runs (block_size is at most that): within it the frequencies are kNone's.
//
// Torch-free and without generated headers in this one, so spec checks and the LibTorch
// models (models/llama.h) share it. Thread safety: pure functions.
#ifndef SHARDLINE_SPEC_ROPE_H_
#define SHARDLINE_SPEC_ROPE_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"

namespace shardline {
class ModelSpec;  // proto/job_spec.proto
}  // namespace shardline

namespace shardline::spec {

struct RotaryScaling {
  enum class Type { kNone, kLinear, kDynamic, kLlama3 };
  Type type = Type::kNone;
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 0;
};

// Checks the parameters the type uses: factor >= 1 (kLinear, kDynamic, kLlama3); for kLlama3
// 0 < low_freq_factor < high_freq_factor and original_max_position_embeddings > 0.
// Errors: INVALID_ARGUMENT naming model.rope_scaling.<field>.
absl::Status ValidateRopeScaling(const RotaryScaling& s);

// The rotary scaling of a spec's model.rope_scaling (the proto's fields as this struct's).
RotaryScaling RopeScalingFromSpec(const ModelSpec& spec);

// The D / 2 inverse frequencies of a head of even size head_dim. `s` must be valid.
std::vector<double> RotaryInverseFrequencies(int64_t head_dim, double theta,
                                             const RotaryScaling& s);

}  // namespace shardline::spec

#endif  // SHARDLINE_SPEC_ROPE_H_
