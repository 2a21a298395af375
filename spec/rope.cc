#include "spec/rope.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "proto/job_spec.pb.h"

namespace shardline::spec {

absl::Status ValidateRopeScaling(const RotaryScaling& s) {
  if (s.type == RotaryScaling::Type::kNone) return absl::OkStatus();
  if (!(s.factor >= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.rope_scaling.factor: ", s.factor, " must be at least 1"));
  }
  if (s.type != RotaryScaling::Type::kLlama3) return absl::OkStatus();
  if (!(s.low_freq_factor > 0) || !(s.high_freq_factor > s.low_freq_factor)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.rope_scaling: low_freq_factor ", s.low_freq_factor, " and high_freq_factor ",
        s.high_freq_factor, " must satisfy 0 < low_freq_factor < high_freq_factor"));
  }
  if (s.original_max_position_embeddings <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.rope_scaling.original_max_position_embeddings: ", s.original_max_position_embeddings,
        " must be positive"));
  }
  return absl::OkStatus();
}

std::vector<double> RotaryInverseFrequencies(int64_t head_dim, double theta,
                                             const RotaryScaling& s) {
  std::vector<double> inv(static_cast<size_t>(head_dim / 2));
  for (size_t i = 0; i < inv.size(); ++i) {
    inv[i] = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
  }
  if (s.type == RotaryScaling::Type::kLinear) {
    for (double& f : inv) f /= s.factor;
  } else if (s.type == RotaryScaling::Type::kLlama3) {
    const double context = static_cast<double>(s.original_max_position_embeddings);
    const double low_wavelen = context / s.low_freq_factor;
    const double high_wavelen = context / s.high_freq_factor;
    for (double& f : inv) {
      const double wavelen = 2 * M_PI / f;
      if (wavelen < high_wavelen) continue;
      if (wavelen > low_wavelen) {
        f /= s.factor;
        continue;
      }
      const double smooth =
          (context / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      f = (1 - smooth) * f / s.factor + smooth * f;
    }
  }
  return inv;
}

RotaryScaling RopeScalingFromSpec(const ModelSpec& spec) {
  const shardline::RopeScaling& rope = spec.rope_scaling();
  RotaryScaling r;
  switch (rope.type()) {
    case shardline::RopeScaling::LINEAR:
      r.type = RotaryScaling::Type::kLinear;
      break;
    case shardline::RopeScaling::DYNAMIC:
      r.type = RotaryScaling::Type::kDynamic;
      break;
    case shardline::RopeScaling::LLAMA3:
      r.type = RotaryScaling::Type::kLlama3;
      break;
    default:
      r.type = RotaryScaling::Type::kNone;
  }
  r.factor = rope.factor();
  r.low_freq_factor = rope.low_freq_factor();
  r.high_freq_factor = rope.high_freq_factor();
  r.original_max_position_embeddings = rope.original_max_position_embeddings();
  return r;
}

}  // namespace shardline::spec
