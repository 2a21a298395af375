// Hugging Face `transformers` configs (config.json) of the Llama and GPT-2 families, read into
// and written from ModelSpec fields. Torch-free: spec loading (shardctl, the trainer) resolves a
// spec's model.hf_dir with it, and `shardctl export --format=hf` writes config.json with it.
//
//   config.json key          LLAMA                        GPT (GPT-2)
//   model_type               "llama"                      "gpt2"
//   n_embd                   hidden_size                  n_embd
//   n_layer                  num_hidden_layers            n_layer
//   n_head                   num_attention_heads          n_head
//   n_kv_head                num_key_value_heads          (= n_head)
//   ffn_hidden               intermediate_size            (n_inner: null or 4 * n_embd)
//   vocab_size               vocab_size                   vocab_size
//   block_size               max_position_embeddings      n_positions
//   rope_theta               rope_theta or rope_parameters.rope_theta
//   norm_eps                 rms_norm_eps                 (layer_norm_epsilon: 1e-5)
//
// What our models cannot express is refused naming the key: rope scaling other than "default",
// partial rotary, biases in Llama projections, a head_dim other than hidden_size /
// num_attention_heads, activations other than silu (Llama) or tanh-GELU (GPT-2), an untied GPT-2
// head, GPT-2's per-layer attention scaling, cross-attention. A tied Llama head
// (tie_word_embeddings) is accepted: our Llama's head is a separate parameter, initialised from
// the embedding and trained separately (exported untied).
//
// Thread safety: pure functions (ResolveHfModel reads the file system).
#ifndef SHARDLINE_SPEC_HF_CONFIG_H_
#define SHARDLINE_SPEC_HF_CONFIG_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/job_spec.pb.h"

namespace shardline::spec {

// Sizes of config.json `json` (read from `source`, for messages) as a ModelSpec: architecture,
// sizes, n_kv_head, rope_theta, norm_eps. Errors: INVALID_ARGUMENT naming source and key.
absl::StatusOr<ModelSpec> ModelSpecFromHfConfig(absl::string_view json, const std::string& source);

// When model->hf_dir() is set: reads <hf_dir>/config.json and fills the architecture and every
// size field that is 0; a set one must agree with config.json (block_size may be smaller for
// LLAMA: a shorter rotary table), and preset must be empty. No-op without hf_dir.
// Errors: NOT_FOUND (no config.json), INVALID_ARGUMENT naming the field or config key.
absl::Status ResolveHfModel(ModelSpec* model);

// config.json for a resolved GPT or LLAMA spec, as `transformers` (4.x and 5.x) reads it.
// Errors: INVALID_ARGUMENT for TORCHSCRIPT.
absl::StatusOr<std::string> HfConfigFromModelSpec(const ModelSpec& model);

// The contents of a small JSON file (config.json, an index), at most 16 MiB.
// Errors: NOT_FOUND, INVALID_ARGUMENT (too large), INTERNAL (read error).
absl::StatusOr<std::string> ReadSmallJsonFile(const std::string& path);

}  // namespace shardline::spec

#endif  // SHARDLINE_SPEC_HF_CONFIG_H_
