// Named model sizes ("tiny", "small", "gpt2", "llama-tiny") and their resolution into explicit
// ModelSpec fields. Torch-free so that the CLI and coordinator can validate specs without LibTorch.
//
//   preset       arch   n_embd n_layer n_head vocab  block  params (approx.)
//   tiny         GPT        64       4      4   256     64   0.2M   tests and demos
//   small        GPT       256       6      8   256    256   4.8M
//   gpt2         GPT       768      12     12 50257   1024   124M   GPT-2 small
//   llama-tiny   LLAMA      64       4      4   256     64   0.3M
//
// Thread safety: pure functions.
#ifndef SHARDLINE_SPEC_MODEL_PRESETS_H_
#define SHARDLINE_SPEC_MODEL_PRESETS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "proto/job_spec.pb.h"

namespace shardline::spec {

// Names of the known presets, in the order above.
std::vector<std::string> PresetNames();

// Fills every size field of `model` that is zero from its preset (and the architecture, when
// unspecified); explicit non-zero fields win. Also fills llama's ffn_hidden (8/3 * n_embd rounded
// up to a multiple of 32) when zero. An empty preset fills nothing.
// Errors: INVALID_ARGUMENT for an unknown preset name, listing the known ones.
absl::Status ResolvePreset(ModelSpec* model);

// Parameter count of a GPT or LLAMA model with these (resolved) sizes; 0 for TORCHSCRIPT.
int64_t CountParameters(const ModelSpec& model);

}  // namespace shardline::spec

#endif  // SHARDLINE_SPEC_MODEL_PRESETS_H_
