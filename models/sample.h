// Text generation from a LanguageModel: autoregressive sampling with temperature and top-k.
//
// Under FSDP every rank of a shard group must run the same forwards (each one gathers
// parameters), so all ranks call Generate with the same seed and get the same tokens; only
// rank 0 prints them.
//
// Thread safety: uses the model; not thread-safe.
#ifndef SHARDLINE_MODELS_SAMPLE_H_
#define SHARDLINE_MODELS_SAMPLE_H_

#include <cstdint>
#include <functional>
#include <vector>

#include <c10/core/Device.h>

#include "absl/status/statusor.h"
#include "models/language_model.h"

namespace shardline::models {

struct SampleOptions {
  int num_tokens = 100;
  // Runs one forward of token ids [1, T] -> logits [1, T, V]; empty: model.Forward. The trainer
  // wraps the FSDP engine's gather/free around it.
  std::function<at::Tensor(const at::Tensor&)> forward;
  double temperature = 0.8;
  int top_k = 0;  // 0: sample from the whole distribution.
  uint64_t seed = 0;
};

// Returns the `num_tokens` sampled ids (without the prompt). The context is cropped to
// block_size(). Runs in eval mode without gradients and restores the module's mode.
// Errors: INVALID_ARGUMENT for an empty prompt; what LibTorch raises, converted by TorchTry; a
// StatusException from the forward (an attached engine's failed collective, or
// options.forward's ThrowIfError) as its own status, e.g. UNAVAILABLE for a lost peer.
absl::StatusOr<std::vector<int64_t>> Generate(LanguageModel& model,
                                              const std::vector<int64_t>& prompt,
                                              const SampleOptions& options, at::Device device);

}  // namespace shardline::models

#endif  // SHARDLINE_MODELS_SAMPLE_H_
