// ModelConfig: a model's resolved sizes as plain values.
//
// Why not ModelSpec itself: LibTorch's include directory ships an older copy of the protobuf
// headers that shadows Debian's in every Bazel target depending on LibTorch, so LibTorch code in
// this project never includes a generated .pb.h. The conversion from the proto lives in the
// torch-free target //models:model_config; the models take this struct.
//
// Thread safety: a value type; functions are pure.
#ifndef SHARDLINE_MODELS_MODEL_CONFIG_H_
#define SHARDLINE_MODELS_MODEL_CONFIG_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "spec/rope.h"

namespace shardline {
class ModelSpec;  // proto/job_spec.proto
}  // namespace shardline

namespace shardline::models {

enum class Architecture { kGpt, kLlama, kTorchScript };

// How the GPT and Llama blocks compute attention (models/attention.h): the fused
// at::scaled_dot_product_attention kernels, or the explicit op-by-op formula (tests, debugging).
enum class AttentionKernel { kSdpa, kExplicit };

struct ModelConfig {
  Architecture architecture = Architecture::kGpt;
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t vocab_size = 0;
  int64_t block_size = 0;
  int64_t ffn_hidden = 0;  // Llama only (resolved: never 0 for LLAMA).
  int64_t n_kv_head = 0;   // Llama only: key/value heads (resolved: n_head when the spec has 0).
  double rope_theta = 10000.0;  // Llama only.
  double norm_eps = 1e-5;       // Llama only: RMSNorm epsilon.
  // Llama only (the Qwen2/Qwen3/Mistral variants; proto/job_spec.proto says each):
  int64_t head_dim = 0;  // Resolved: n_embd / n_head when the spec has 0.
  bool attention_qkv_bias = false;
  bool attention_out_bias = false;
  bool qk_norm = false;
  bool tie_embeddings = false;
  spec::RotaryScaling rope_scaling;
  int64_t sliding_window = 0;  // 0: none.
  double dropout = 0.0;
  std::string torchscript_path;
  // TorchScript only: the class whose forward calls become FSDP hook points (the job spec's
  // fsdp.block_class; models/script_blocks.h). "" for none.
  std::string block_class;
  std::string hf_dir;  // A Hugging Face folder the sizes came from (spec/hf_config.h); "" for none.
  uint64_t init_seed = 0;
  // Not in the job spec: always kSdpa there. Tests set kExplicit to check the fused kernels.
  AttentionKernel attention = AttentionKernel::kSdpa;
};

// Resolves the preset (spec/model_presets.h) and copies the fields; Llama's 0 fields become their
// defaults (n_kv_head: n_head, rope_theta: 10000, norm_eps: 1e-5, head_dim: n_embd / n_head). A
// spec with model.hf_dir must have been resolved already (spec loading does: spec/hf_config.h).
// Errors: INVALID_ARGUMENT for an unknown preset or an unspecified architecture.
absl::StatusOr<ModelConfig> ModelConfigFromSpec(const ModelSpec& spec);

// The config of a named preset ("tiny", "small", "gpt2", "llama-tiny"), for tests and tools.
absl::StatusOr<ModelConfig> PresetModelConfig(absl::string_view preset, uint64_t init_seed);

// Parameter count of a GPT or Llama config (spec::CountParameters); 0 for TorchScript.
int64_t CountParameters(const ModelConfig& config);

}  // namespace shardline::models

#endif  // SHARDLINE_MODELS_MODEL_CONFIG_H_
