// Hugging Face `transformers` configs (config.json) of the Llama family (model_type llama,
// qwen2, qwen3, mistral: one LLAMA architecture with the variants' fields) and GPT-2, read into
// and written from ModelSpec fields. Torch-free: spec loading (shardctl, the trainer) resolves a
// spec's model.hf_dir with it, and `shardctl export --format=hf` writes config.json with it.
//
//   config.json key            LLAMA (llama, qwen2, qwen3, mistral)   GPT (GPT-2)
//   model_type                 hf_model_type                          "gpt2"
//   hidden_size / n_embd       n_embd                                 n_embd
//   num_hidden_layers          n_layer                                n_layer
//   num_attention_heads        n_head                                 n_head
//   num_key_value_heads        n_kv_head                              (= n_head)
//   head_dim                   head_dim (kept when not n_embd/n_head; qwen3's default 128)
//   intermediate_size          ffn_hidden                             (n_inner: 4 * n_embd)
//   vocab_size                 vocab_size                             vocab_size
//   max_position_embeddings    block_size                             n_positions
//   rope_theta, rope_parameters / rope_scaling   rope_theta, rope_scaling (default, linear,
//                                                dynamic, llama3)
//   rms_norm_eps               norm_eps                               (layer_norm_epsilon 1e-5)
//   attention_bias (llama, qwen3)   attention_qkv_bias and attention_out_bias
//   (qwen2)                    attention_qkv_bias = true
//   (qwen3)                    qk_norm = true
//   sliding_window (mistral)   sliding_window (null: 0)
//   tie_word_embeddings        tie_embeddings                         (must be true)
//
// What our models cannot express is refused naming the key: rope types other than the four
// (yarn, longrope, ...), partial rotary, an odd head_dim, mlp_bias, activations other than silu
// (Llama family) or tanh-GELU (GPT-2), Qwen's use_sliding_window and layer_types other than
// full_attention, an untied GPT-2 head, GPT-2's per-layer attention scaling, cross-attention.
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

// The transformers family (model_type) a GPT or LLAMA spec is exported as: model.hf_model_type
// when set, else chosen from the variant's fields (qk_norm: qwen3; q/k/v but no output bias:
// qwen2; a sliding window: mistral; else llama). Errors: INVALID_ARGUMENT naming
// model.hf_model_type when the family cannot express the fields (e.g. qwen2 without biases).
absl::StatusOr<std::string> HfModelType(const ModelSpec& model);

// config.json for a resolved GPT or LLAMA spec, as `transformers` (4.x and 5.x) reads it.
// Errors: INVALID_ARGUMENT for TORCHSCRIPT.
absl::StatusOr<std::string> HfConfigFromModelSpec(const ModelSpec& model);

// The contents of a small JSON file (config.json, an index), at most 16 MiB.
// Errors: NOT_FOUND, INVALID_ARGUMENT (too large), INTERNAL (read error).
absl::StatusOr<std::string> ReadSmallJsonFile(const std::string& path);

}  // namespace shardline::spec

#endif  // SHARDLINE_SPEC_HF_CONFIG_H_
