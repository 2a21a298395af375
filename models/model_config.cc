#include "models/model_config.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "proto/job_spec.pb.h"
#include "spec/model_presets.h"

namespace shardline::models {
namespace {

ModelSpec ToSpec(const ModelConfig& c) {
  ModelSpec m;
  m.set_architecture(c.architecture == Architecture::kGpt     ? ModelSpec::GPT
                     : c.architecture == Architecture::kLlama ? ModelSpec::LLAMA
                                                              : ModelSpec::TORCHSCRIPT);
  m.set_n_embd(static_cast<int32_t>(c.n_embd));
  m.set_n_layer(static_cast<int32_t>(c.n_layer));
  m.set_n_head(static_cast<int32_t>(c.n_head));
  m.set_vocab_size(static_cast<int32_t>(c.vocab_size));
  m.set_block_size(static_cast<int32_t>(c.block_size));
  m.set_ffn_hidden(static_cast<int32_t>(c.ffn_hidden));
  m.set_n_kv_head(static_cast<int32_t>(c.n_kv_head));
  m.set_head_dim(static_cast<int32_t>(c.head_dim));
  m.set_attention_qkv_bias(c.attention_qkv_bias);
  m.set_attention_out_bias(c.attention_out_bias);
  m.set_qk_norm(c.qk_norm);
  m.set_tie_embeddings(c.tie_embeddings);
  return m;
}

}  // namespace

absl::StatusOr<ModelConfig> ModelConfigFromSpec(const ModelSpec& input) {
  ModelSpec spec = input;
  RETURN_IF_ERROR(spec::ResolvePreset(&spec));
  ModelConfig c;
  switch (spec.architecture()) {
    case ModelSpec::GPT:
      c.architecture = Architecture::kGpt;
      break;
    case ModelSpec::LLAMA:
      c.architecture = Architecture::kLlama;
      break;
    case ModelSpec::TORCHSCRIPT:
      c.architecture = Architecture::kTorchScript;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("model.architecture: ", ModelSpec::Architecture_Name(spec.architecture()),
                       " is not one of GPT, LLAMA, TORCHSCRIPT"));
  }
  c.n_embd = spec.n_embd();
  c.n_layer = spec.n_layer();
  c.n_head = spec.n_head();
  c.vocab_size = spec.vocab_size();
  c.block_size = spec.block_size();
  c.ffn_hidden = spec.ffn_hidden();
  c.dropout = spec.dropout();
  c.n_kv_head = spec.n_kv_head() > 0 ? spec.n_kv_head() : spec.n_head();
  if (spec.rope_theta() > 0) c.rope_theta = spec.rope_theta();
  if (spec.norm_eps() > 0) c.norm_eps = spec.norm_eps();
  c.head_dim = spec.head_dim() > 0 ? spec.head_dim()
               : spec.n_head() > 0 ? spec.n_embd() / spec.n_head()
                                   : 0;
  c.attention_qkv_bias = spec.attention_qkv_bias();
  c.attention_out_bias = spec.attention_out_bias();
  c.qk_norm = spec.qk_norm();
  c.tie_embeddings = spec.tie_embeddings();
  c.sliding_window = spec.sliding_window();
  c.rope_scaling = spec::RopeScalingFromSpec(spec);
  if (c.architecture == Architecture::kLlama)
    RETURN_IF_ERROR(spec::ValidateRopeScaling(c.rope_scaling));
  c.torchscript_path = spec.torchscript_path();
  c.hf_dir = spec.hf_dir();
  c.init_seed = spec.init_seed();
  return c;
}

absl::StatusOr<ModelConfig> PresetModelConfig(absl::string_view preset, uint64_t init_seed) {
  ModelSpec spec;
  spec.set_preset(std::string(preset));
  spec.set_init_seed(init_seed);
  return ModelConfigFromSpec(spec);
}

int64_t CountParameters(const ModelConfig& config) { return spec::CountParameters(ToSpec(config)); }

}  // namespace shardline::models
