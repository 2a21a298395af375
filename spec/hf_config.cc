#include "spec/hf_config.h"

#include <sys/stat.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include "absl/strings/str_cat.h"
#include "common/open_beneath.h"
#include "common/status_macros.h"

namespace shardline::spec {
namespace {

using google::protobuf::Struct;
using google::protobuf::Value;

constexpr int64_t kMaxJsonBytes = 16 << 20;

// Typed reads of one config.json; messages name the source and the key.
class Config {
 public:
  Config(const Struct& s, std::string source) : s_(s), source_(std::move(source)) {}

  bool Has(const std::string& key) const {
    auto it = s_.fields().find(key);
    return it != s_.fields().end() && it->second.kind_case() != Value::kNullValue;
  }
  absl::Status Error(const std::string& key, absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(source_, ": ", key, " ", what));
  }
  absl::StatusOr<int64_t> Int(const std::string& key) const {
    if (!Has(key)) return Error(key, "is missing");
    return IntValue(key, s_.fields().at(key));
  }
  absl::StatusOr<int64_t> IntOr(const std::string& key, int64_t fallback) const {
    return Has(key) ? Int(key) : fallback;
  }
  absl::StatusOr<double> DoubleOr(const std::string& key, double fallback) const {
    if (!Has(key)) return fallback;
    const Value& v = s_.fields().at(key);
    if (v.kind_case() != Value::kNumberValue) return Error(key, "is not a number");
    return v.number_value();
  }
  absl::StatusOr<std::string> StringOr(const std::string& key, const std::string& fallback) const {
    if (!Has(key)) return fallback;
    const Value& v = s_.fields().at(key);
    if (v.kind_case() != Value::kStringValue) return Error(key, "is not a string");
    return v.string_value();
  }
  absl::StatusOr<bool> BoolOr(const std::string& key, bool fallback) const {
    if (!Has(key)) return fallback;
    const Value& v = s_.fields().at(key);
    if (v.kind_case() != Value::kBoolValue) return Error(key, "is not true or false");
    return v.bool_value();
  }
  // A nested object, or nullptr when absent or null.
  absl::StatusOr<const Struct*> Object(const std::string& key) const {
    if (!Has(key)) return nullptr;
    const Value& v = s_.fields().at(key);
    if (v.kind_case() != Value::kStructValue) return Error(key, "is not an object");
    return &v.struct_value();
  }
  const std::string& source() const { return source_; }

  absl::StatusOr<int64_t> IntValue(const std::string& key, const Value& v) const {
    if (v.kind_case() != Value::kNumberValue || v.number_value() != std::floor(v.number_value()) ||
        v.number_value() < 1 || v.number_value() > (1 << 30)) {
      return Error(key, "is not a positive integer (at most 2^30)");
    }
    return static_cast<int64_t>(v.number_value());
  }

 private:
  const Struct& s_;
  std::string source_;
};

// rope_scaling (4.x) or rope_parameters (5.x): only the default rotary type, with its theta.
absl::StatusOr<double> RopeTheta(const Config& c) {
  ASSIGN_OR_RETURN(double theta, c.DoubleOr("rope_theta", 10000.0));
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    ASSIGN_OR_RETURN(const Struct* rope, c.Object(key));
    if (rope == nullptr) continue;
    Config r(*rope, absl::StrCat(c.source(), ": ", key));
    ASSIGN_OR_RETURN(std::string type, r.StringOr("rope_type", ""));
    if (type.empty()) {
      ASSIGN_OR_RETURN(type, r.StringOr("type", "default"));
    }
    if (type != "default") {
      return c.Error(absl::StrCat(key, ".rope_type"),
                     absl::StrCat("\"", type,
                                  "\" is not implemented (Shardline's Llama has only the default "
                                  "rotary embedding)"));
    }
    ASSIGN_OR_RETURN(theta, r.DoubleOr("rope_theta", theta));
    ASSIGN_OR_RETURN(double partial, r.DoubleOr("partial_rotary_factor", 1.0));
    if (partial != 1.0) return c.Error(absl::StrCat(key, ".partial_rotary_factor"), "must be 1");
  }
  ASSIGN_OR_RETURN(double partial, c.DoubleOr("partial_rotary_factor", 1.0));
  if (partial != 1.0) return c.Error("partial_rotary_factor", "must be 1");
  if (!(theta > 0)) return c.Error("rope_theta", "must be positive");
  return theta;
}

absl::Status RequireFalse(const Config& c, const std::string& key, absl::string_view why) {
  ASSIGN_OR_RETURN(bool value, c.BoolOr(key, false));
  if (value) return c.Error(key, absl::StrCat("true is not supported: ", why));
  return absl::OkStatus();
}

absl::StatusOr<ModelSpec> Llama(const Config& c) {
  ModelSpec m;
  m.set_architecture(ModelSpec::LLAMA);
  ASSIGN_OR_RETURN(int64_t hidden, c.Int("hidden_size"));
  ASSIGN_OR_RETURN(int64_t layers, c.Int("num_hidden_layers"));
  ASSIGN_OR_RETURN(int64_t heads, c.Int("num_attention_heads"));
  ASSIGN_OR_RETURN(int64_t kv_heads, c.IntOr("num_key_value_heads", heads));
  ASSIGN_OR_RETURN(int64_t ffn, c.Int("intermediate_size"));
  ASSIGN_OR_RETURN(int64_t vocab, c.Int("vocab_size"));
  ASSIGN_OR_RETURN(int64_t positions, c.IntOr("max_position_embeddings", 2048));
  if (hidden % heads != 0) {
    return c.Error("hidden_size",
                   absl::StrCat(hidden, " is not divisible by num_attention_heads ", heads));
  }
  if (c.Has("head_dim")) {
    ASSIGN_OR_RETURN(int64_t head_dim, c.Int("head_dim"));
    if (head_dim != hidden / heads) {
      return c.Error("head_dim",
                     absl::StrCat(head_dim, " is not hidden_size / num_attention_heads = ",
                                  hidden / heads, " (our attention needs that)"));
    }
  }
  if (heads % kv_heads != 0) {
    return c.Error("num_key_value_heads",
                   absl::StrCat(kv_heads, " does not divide num_attention_heads ", heads));
  }
  ASSIGN_OR_RETURN(std::string act, c.StringOr("hidden_act", "silu"));
  if (act != "silu") {
    return c.Error("hidden_act", absl::StrCat("\"", act, "\" is not silu (our SwiGLU uses silu)"));
  }
  RETURN_IF_ERROR(RequireFalse(c, "attention_bias", "our Llama projections have no biases"));
  RETURN_IF_ERROR(RequireFalse(c, "mlp_bias", "our Llama MLP has no biases"));
  ASSIGN_OR_RETURN(double theta, RopeTheta(c));
  ASSIGN_OR_RETURN(double eps, c.DoubleOr("rms_norm_eps", 1e-6));
  if (!(eps > 0)) return c.Error("rms_norm_eps", "must be positive");
  m.set_n_embd(static_cast<int32_t>(hidden));
  m.set_n_layer(static_cast<int32_t>(layers));
  m.set_n_head(static_cast<int32_t>(heads));
  m.set_n_kv_head(static_cast<int32_t>(kv_heads));
  m.set_ffn_hidden(static_cast<int32_t>(ffn));
  m.set_vocab_size(static_cast<int32_t>(vocab));
  m.set_block_size(static_cast<int32_t>(positions));
  m.set_rope_theta(theta);
  m.set_norm_eps(eps);
  return m;
}

absl::StatusOr<ModelSpec> Gpt2(const Config& c) {
  ModelSpec m;
  m.set_architecture(ModelSpec::GPT);
  ASSIGN_OR_RETURN(int64_t n_embd, c.Int("n_embd"));
  ASSIGN_OR_RETURN(int64_t n_layer, c.Int("n_layer"));
  ASSIGN_OR_RETURN(int64_t n_head, c.Int("n_head"));
  ASSIGN_OR_RETURN(int64_t vocab, c.Int("vocab_size"));
  ASSIGN_OR_RETURN(int64_t positions, c.Int("n_positions"));
  if (n_embd % n_head != 0) {
    return c.Error("n_embd", absl::StrCat(n_embd, " is not divisible by n_head ", n_head));
  }
  ASSIGN_OR_RETURN(int64_t inner, c.IntOr("n_inner", 4 * n_embd));
  if (inner != 4 * n_embd) {
    return c.Error("n_inner", absl::StrCat(inner, " is not 4 * n_embd = ", 4 * n_embd,
                                           " (our GPT's MLP width)"));
  }
  ASSIGN_OR_RETURN(std::string act, c.StringOr("activation_function", "gelu_new"));
  if (act != "gelu_new" && act != "gelu_pytorch_tanh") {
    return c.Error("activation_function",
                   absl::StrCat("\"", act,
                                "\" is not gelu_new or gelu_pytorch_tanh (our GPT uses the tanh "
                                "GELU)"));
  }
  ASSIGN_OR_RETURN(double eps, c.DoubleOr("layer_norm_epsilon", 1e-5));
  if (std::abs(eps - 1e-5) > 1e-12) {
    return c.Error("layer_norm_epsilon", absl::StrCat(eps, " is not 1e-5 (our GPT's LayerNorm)"));
  }
  ASSIGN_OR_RETURN(bool scale, c.BoolOr("scale_attn_weights", true));
  if (!scale)
    return c.Error("scale_attn_weights", "false is not supported (ours scales by 1/sqrt(D))");
  RETURN_IF_ERROR(
      RequireFalse(c, "scale_attn_by_inverse_layer_idx", "our attention does not scale by layer"));
  RETURN_IF_ERROR(RequireFalse(c, "add_cross_attention", "our GPT is decoder-only"));
  ASSIGN_OR_RETURN(bool tied, c.BoolOr("tie_word_embeddings", true));
  if (!tied)
    return c.Error("tie_word_embeddings", "false is not supported (our GPT ties its head)");
  m.set_n_embd(static_cast<int32_t>(n_embd));
  m.set_n_layer(static_cast<int32_t>(n_layer));
  m.set_n_head(static_cast<int32_t>(n_head));
  m.set_vocab_size(static_cast<int32_t>(vocab));
  m.set_block_size(static_cast<int32_t>(positions));
  return m;
}

// Fills `field` of `model` from the config's value, or checks they agree.
absl::Status Agree(const char* field, int64_t config_value, int32_t (ModelSpec::*get)() const,
                   void (ModelSpec::*set)(int32_t), const std::string& source, ModelSpec* model,
                   bool may_be_smaller = false) {
  const int64_t mine = (model->*get)();
  if (mine == 0) {
    (model->*set)(static_cast<int32_t>(config_value));
  } else if (mine != config_value && !(may_be_smaller && mine < config_value)) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.", field, ": ", mine, may_be_smaller ? " exceeds " : " does not match ",
                     source, "'s ", config_value, " (leave it unset to take the config's)"));
  }
  return absl::OkStatus();
}

// Round-trips a double. snprintf: absl::StrFormat of a double left an undefined symbol
// (FormatArgImpl::Dispatch<double>) in the dynamically linked tests with Debian's Abseil.
std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

}  // namespace

absl::StatusOr<std::string> ReadSmallJsonFile(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0)
    return absl::NotFoundError(absl::StrCat(path, " does not exist"));
  if (st.st_size > kMaxJsonBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is ", st.st_size, " bytes; at most ", kMaxJsonBytes, " are read"));
  }
  // Beneath the path policy's roots at the open (common/open_beneath.h).
  return ReadFileBeneath(path, "JSON file");
}

absl::StatusOr<ModelSpec> ModelSpecFromHfConfig(absl::string_view json, const std::string& source) {
  Struct s;
  const auto parsed = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(json.data(), json.size()), &s);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": not a JSON object: ", std::string(parsed.message())));
  }
  Config c(s, source);
  ASSIGN_OR_RETURN(std::string type, c.StringOr("model_type", ""));
  if (type == "llama") return Llama(c);
  if (type == "gpt2") return Gpt2(c);
  return c.Error("model_type", absl::StrCat("\"", type,
                                            "\" is not one of llama, gpt2 (the families "
                                            "Shardline's models implement)"));
}

absl::Status ResolveHfModel(ModelSpec* model) {
  if (model->hf_dir().empty()) return absl::OkStatus();
  const std::string path = absl::StrCat(model->hf_dir(), "/config.json");
  absl::StatusOr<std::string> json = ReadSmallJsonFile(path);
  if (!json.ok()) {
    return absl::Status(json.status().code(),
                        absl::StrCat("model.hf_dir: ", json.status().message()));
  }
  ASSIGN_OR_RETURN(ModelSpec hf, ModelSpecFromHfConfig(*json, path));
  if (!model->preset().empty()) {
    return absl::InvalidArgumentError(absl::StrCat("model.preset: \"", model->preset(),
                                                   "\" cannot be combined with model.hf_dir"));
  }
  if (model->architecture() == ModelSpec::ARCHITECTURE_UNSPECIFIED) {
    model->set_architecture(hf.architecture());
  } else if (model->architecture() != hf.architecture()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.architecture: ", ModelSpec::Architecture_Name(model->architecture()),
        " does not match ", path, "'s ", ModelSpec::Architecture_Name(hf.architecture())));
  }
  RETURN_IF_ERROR(
      Agree("n_embd", hf.n_embd(), &ModelSpec::n_embd, &ModelSpec::set_n_embd, path, model));
  RETURN_IF_ERROR(
      Agree("n_layer", hf.n_layer(), &ModelSpec::n_layer, &ModelSpec::set_n_layer, path, model));
  RETURN_IF_ERROR(
      Agree("n_head", hf.n_head(), &ModelSpec::n_head, &ModelSpec::set_n_head, path, model));
  RETURN_IF_ERROR(Agree("vocab_size", hf.vocab_size(), &ModelSpec::vocab_size,
                        &ModelSpec::set_vocab_size, path, model));
  RETURN_IF_ERROR(Agree("block_size", hf.block_size(), &ModelSpec::block_size,
                        &ModelSpec::set_block_size, path, model,
                        /*may_be_smaller=*/hf.architecture() == ModelSpec::LLAMA));
  if (hf.architecture() == ModelSpec::LLAMA) {
    RETURN_IF_ERROR(Agree("ffn_hidden", hf.ffn_hidden(), &ModelSpec::ffn_hidden,
                          &ModelSpec::set_ffn_hidden, path, model));
    RETURN_IF_ERROR(Agree("n_kv_head", hf.n_kv_head(), &ModelSpec::n_kv_head,
                          &ModelSpec::set_n_kv_head, path, model));
    for (auto [field, mine, theirs] : {std::tuple<const char*, double, double>{
                                           "rope_theta", model->rope_theta(), hf.rope_theta()},
                                       {"norm_eps", model->norm_eps(), hf.norm_eps()}}) {
      if (mine != 0 && mine != theirs) {
        return absl::InvalidArgumentError(absl::StrCat("model.", field, ": ", mine,
                                                       " does not match ", path, "'s ", theirs,
                                                       " (leave it unset to take the config's)"));
      }
    }
    model->set_rope_theta(hf.rope_theta());
    model->set_norm_eps(hf.norm_eps());
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> HfConfigFromModelSpec(const ModelSpec& m) {
  if (m.architecture() == ModelSpec::LLAMA) {
    const int64_t kv = m.n_kv_head() > 0 ? m.n_kv_head() : m.n_head();
    const double theta = m.rope_theta() > 0 ? m.rope_theta() : 10000.0;
    const double eps = m.norm_eps() > 0 ? m.norm_eps() : 1e-5;
    return absl::StrCat(
        "{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"model_type\": \"llama\",\n",
        "  \"hidden_size\": ", m.n_embd(), ",\n  \"intermediate_size\": ", m.ffn_hidden(),
        ",\n  \"num_hidden_layers\": ", m.n_layer(), ",\n  \"num_attention_heads\": ", m.n_head(),
        ",\n  \"num_key_value_heads\": ", kv, ",\n  \"head_dim\": ", m.n_embd() / m.n_head(),
        ",\n  \"vocab_size\": ", m.vocab_size(),
        ",\n  \"max_position_embeddings\": ", m.block_size(), ",\n  \"rms_norm_eps\": ", Num(eps),
        ",\n  \"rope_theta\": ", Num(theta),
        ",\n  \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": ", Num(theta),
        "},\n  \"hidden_act\": \"silu\",\n  \"attention_bias\": false,\n  \"mlp_bias\": false,\n"
        "  \"attention_dropout\": 0.0,\n  \"tie_word_embeddings\": false,\n"
        "  \"torch_dtype\": \"float32\"\n}\n");
  }
  if (m.architecture() == ModelSpec::GPT) {
    return absl::StrCat(
        "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n",
        "  \"n_embd\": ", m.n_embd(), ",\n  \"n_layer\": ", m.n_layer(),
        ",\n  \"n_head\": ", m.n_head(), ",\n  \"n_positions\": ", m.block_size(),
        ",\n  \"vocab_size\": ", m.vocab_size(),
        ",\n  \"n_inner\": null,\n  \"activation_function\": \"gelu_new\",\n"
        "  \"layer_norm_epsilon\": 1e-05,\n  \"scale_attn_weights\": true,\n"
        "  \"scale_attn_by_inverse_layer_idx\": false,\n  \"reorder_and_upcast_attn\": false,\n"
        "  \"resid_pdrop\": 0.0,\n  \"embd_pdrop\": 0.0,\n  \"attn_pdrop\": 0.0,\n",
        // transformers' GPT-2 defaults both to 50256 (GPT-2's <|endoftext|>); outside a smaller
        // vocabulary (a byte-level or own BPE model) from_pretrained warns and generate() would
        // stop on an id the model never produces, so such a model gets none.
        m.vocab_size() > 50256 ? "  \"bos_token_id\": 50256,\n  \"eos_token_id\": 50256,\n"
                               : "  \"bos_token_id\": null,\n  \"eos_token_id\": null,\n",
        "  \"tie_word_embeddings\": true,\n  \"torch_dtype\": \"float32\"\n}\n");
  }
  return absl::InvalidArgumentError(
      absl::StrCat("model.architecture: ", ModelSpec::Architecture_Name(m.architecture()),
                   " has no Hugging Face config (only GPT and LLAMA)"));
}

}  // namespace shardline::spec
