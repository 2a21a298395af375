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
#include "spec/rope.h"

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
  // A list of strings.
  absl::StatusOr<std::vector<std::string>> StringList(const std::string& key) const {
    std::vector<std::string> out;
    if (!Has(key)) return out;
    const Value& v = s_.fields().at(key);
    if (v.kind_case() != Value::kListValue) return Error(key, "is not a list");
    for (const Value& e : v.list_value().values()) {
      if (e.kind_case() != Value::kStringValue) return Error(key, "is not a list of strings");
      out.push_back(e.string_value());
    }
    return out;
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

// rope_scaling (4.x) or rope_parameters (5.x): the rotary type and its parameters, and theta.
absl::Status ReadRope(const Config& c, int64_t positions, ModelSpec* m) {
  ASSIGN_OR_RETURN(double theta, c.DoubleOr("rope_theta", 10000.0));
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    ASSIGN_OR_RETURN(const Struct* rope, c.Object(key));
    if (rope == nullptr) continue;
    Config r(*rope, absl::StrCat(c.source(), ": ", key));
    ASSIGN_OR_RETURN(std::string type, r.StringOr("rope_type", ""));
    if (type.empty()) {
      ASSIGN_OR_RETURN(type, r.StringOr("type", "default"));
    }
    RopeScaling scaling;
    if (type == "linear") {
      scaling.set_type(RopeScaling::LINEAR);
    } else if (type == "dynamic") {
      scaling.set_type(RopeScaling::DYNAMIC);
    } else if (type == "llama3") {
      scaling.set_type(RopeScaling::LLAMA3);
    } else if (type != "default") {
      return c.Error(absl::StrCat(key, ".rope_type"),
                     absl::StrCat("\"", type,
                                  "\" is not implemented (Shardline's Llama has default, linear, "
                                  "dynamic and llama3 rotary embeddings)"));
    }
    if (scaling.type() != RopeScaling::NONE) {
      if (!r.Has("factor")) return c.Error(absl::StrCat(key, ".factor"), "is missing");
      ASSIGN_OR_RETURN(double factor, r.DoubleOr("factor", 1.0));
      scaling.set_factor(factor);
    }
    if (scaling.type() == RopeScaling::LLAMA3) {
      for (const char* k : {"low_freq_factor", "high_freq_factor"}) {
        if (!r.Has(k)) return c.Error(absl::StrCat(key, ".", k), "is missing");
      }
      ASSIGN_OR_RETURN(double low, r.DoubleOr("low_freq_factor", 0));
      ASSIGN_OR_RETURN(double high, r.DoubleOr("high_freq_factor", 0));
      ASSIGN_OR_RETURN(int64_t original, r.IntOr("original_max_position_embeddings", positions));
      scaling.set_low_freq_factor(low);
      scaling.set_high_freq_factor(high);
      scaling.set_original_max_position_embeddings(static_cast<int32_t>(original));
    }
    // rope_scaling and rope_parameters both present (a 4.x file re-saved): the later one wins
    // where it names a type; a "default" rope_parameters does not undo a scaling.
    if (scaling.type() != RopeScaling::NONE) *m->mutable_rope_scaling() = scaling;
    ASSIGN_OR_RETURN(theta, r.DoubleOr("rope_theta", theta));
    ASSIGN_OR_RETURN(double partial, r.DoubleOr("partial_rotary_factor", 1.0));
    if (partial != 1.0) return c.Error(absl::StrCat(key, ".partial_rotary_factor"), "must be 1");
  }
  ASSIGN_OR_RETURN(double partial, c.DoubleOr("partial_rotary_factor", 1.0));
  if (partial != 1.0) return c.Error("partial_rotary_factor", "must be 1");
  if (!(theta > 0)) return c.Error("rope_theta", "must be positive");
  m->set_rope_theta(theta);
  if (absl::Status s = ValidateRopeScaling(RopeScalingFromSpec(*m)); !s.ok()) {
    return c.Error("rope_scaling", s.message());
  }
  return absl::OkStatus();
}

absl::Status RequireFalse(const Config& c, const std::string& key, absl::string_view why) {
  ASSIGN_OR_RETURN(bool value, c.BoolOr(key, false));
  if (value) return c.Error(key, absl::StrCat("true is not supported: ", why));
  return absl::OkStatus();
}

// Only full attention in every layer (Qwen's optional sliding layers are not implemented).
absl::Status RequireFullAttention(const Config& c) {
  RETURN_IF_ERROR(RequireFalse(
      c, "use_sliding_window",
      "Qwen's sliding-window layers are not implemented (Mistral's sliding_window is)"));
  if (!c.Has("layer_types")) return absl::OkStatus();
  // layer_types is a list; any entry but "full_attention" is refused.
  ASSIGN_OR_RETURN(std::vector<std::string> types, c.StringList("layer_types"));
  for (size_t i = 0; i < types.size(); ++i) {
    if (types[i] != "full_attention") {
      return c.Error(absl::StrCat("layer_types[", i, "]"),
                     absl::StrCat("\"", types[i], "\" is not full_attention"));
    }
  }
  return absl::OkStatus();
}

// The Llama family: llama, qwen2, qwen3, mistral (model_type), one architecture with the
// variants' fields (proto/job_spec.proto). Defaults are transformers' for each model_type.
absl::StatusOr<ModelSpec> LlamaFamily(const Config& c, const std::string& type) {
  ModelSpec m;
  m.set_architecture(ModelSpec::LLAMA);
  m.set_hf_model_type(type);
  ASSIGN_OR_RETURN(int64_t hidden, c.Int("hidden_size"));
  ASSIGN_OR_RETURN(int64_t layers, c.Int("num_hidden_layers"));
  ASSIGN_OR_RETURN(int64_t heads, c.Int("num_attention_heads"));
  ASSIGN_OR_RETURN(int64_t kv_heads, c.IntOr("num_key_value_heads", heads));
  ASSIGN_OR_RETURN(int64_t ffn, c.Int("intermediate_size"));
  ASSIGN_OR_RETURN(int64_t vocab, c.Int("vocab_size"));
  const int64_t default_positions = type == "llama" ? 2048 : type == "mistral" ? 4096 * 32 : 32768;
  ASSIGN_OR_RETURN(int64_t positions, c.IntOr("max_position_embeddings", default_positions));
  // Qwen3's config class defaults head_dim to 128; the others to hidden_size / heads.
  int64_t head_dim = 0;
  if (c.Has("head_dim") || type == "qwen3") {
    ASSIGN_OR_RETURN(head_dim, c.IntOr("head_dim", 128));
  } else if (hidden % heads != 0) {
    return c.Error("hidden_size", absl::StrCat(hidden, " is not divisible by num_attention_heads ",
                                               heads, " (and head_dim is not given)"));
  } else {
    head_dim = hidden / heads;
  }
  if (head_dim % 2 != 0) {
    return c.Error("head_dim",
                   absl::StrCat(head_dim, " is odd; rotary embeddings pair a head's channels"));
  }
  if (heads % kv_heads != 0) {
    return c.Error("num_key_value_heads",
                   absl::StrCat(kv_heads, " does not divide num_attention_heads ", heads));
  }
  ASSIGN_OR_RETURN(std::string act, c.StringOr("hidden_act", "silu"));
  if (act != "silu") {
    return c.Error("hidden_act", absl::StrCat("\"", act, "\" is not silu (our SwiGLU uses silu)"));
  }
  if (type == "llama") {
    RETURN_IF_ERROR(RequireFalse(c, "mlp_bias", "our Llama MLP has no biases"));
  }
  if (type == "llama" || type == "qwen3") {
    ASSIGN_OR_RETURN(bool bias, c.BoolOr("attention_bias", false));
    m.set_attention_qkv_bias(bias);  // transformers biases q, k, v and o alike.
    m.set_attention_out_bias(bias);
  }
  if (type == "qwen2") m.set_attention_qkv_bias(true);  // Qwen2Attention: q/k/v biased, o not.
  if (type == "qwen3") m.set_qk_norm(true);
  if (type == "qwen2" || type == "qwen3") RETURN_IF_ERROR(RequireFullAttention(c));
  if (type == "mistral") {
    ASSIGN_OR_RETURN(int64_t window, c.IntOr("sliding_window", 0));  // null: none.
    m.set_sliding_window(static_cast<int32_t>(window));
  }
  ASSIGN_OR_RETURN(bool tied, c.BoolOr("tie_word_embeddings", false));
  m.set_tie_embeddings(tied);
  RETURN_IF_ERROR(ReadRope(c, positions, &m));
  ASSIGN_OR_RETURN(double eps, c.DoubleOr("rms_norm_eps", 1e-6));
  if (!(eps > 0)) return c.Error("rms_norm_eps", "must be positive");
  m.set_n_embd(static_cast<int32_t>(hidden));
  m.set_n_layer(static_cast<int32_t>(layers));
  m.set_n_head(static_cast<int32_t>(heads));
  m.set_n_kv_head(static_cast<int32_t>(kv_heads));
  // head_dim is kept only where it differs from the width's split, so a plain Llama's spec
  // reads as before.
  if (hidden % heads != 0 || head_dim != hidden / heads)
    m.set_head_dim(static_cast<int32_t>(head_dim));
  m.set_ffn_hidden(static_cast<int32_t>(ffn));
  m.set_vocab_size(static_cast<int32_t>(vocab));
  m.set_block_size(static_cast<int32_t>(positions));
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
  if (type == "llama" || type == "qwen2" || type == "qwen3" || type == "mistral") {
    return LlamaFamily(c, type);
  }
  if (type == "gpt2") return Gpt2(c);
  return c.Error("model_type", absl::StrCat("\"", type,
                                            "\" is not one of llama, qwen2, qwen3, mistral, gpt2 "
                                            "(the families Shardline's models implement)"));
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
    RETURN_IF_ERROR(Agree("head_dim", hf.head_dim(), &ModelSpec::head_dim, &ModelSpec::set_head_dim,
                          path, model));
    RETURN_IF_ERROR(Agree("sliding_window", hf.sliding_window(), &ModelSpec::sliding_window,
                          &ModelSpec::set_sliding_window, path, model));
    // The variant's switches come from config.json; a spec that sets one must agree.
    for (auto [field, get, set] :
         {std::tuple<const char*, bool (ModelSpec::*)() const, void (ModelSpec::*)(bool)>{
              "attention_qkv_bias", &ModelSpec::attention_qkv_bias,
              &ModelSpec::set_attention_qkv_bias},
          {"attention_out_bias", &ModelSpec::attention_out_bias,
           &ModelSpec::set_attention_out_bias},
          {"qk_norm", &ModelSpec::qk_norm, &ModelSpec::set_qk_norm},
          {"tie_embeddings", &ModelSpec::tie_embeddings, &ModelSpec::set_tie_embeddings}}) {
      if ((model->*get)() && !(hf.*get)()) {
        return absl::InvalidArgumentError(absl::StrCat("model.", field, ": true does not match ",
                                                       path,
                                                       " (leave it unset to take the config's)"));
      }
      (model->*set)((hf.*get)());
    }
    if (model->rope_scaling().type() != RopeScaling::NONE &&
        model->rope_scaling().SerializeAsString() != hf.rope_scaling().SerializeAsString()) {
      return absl::InvalidArgumentError(absl::StrCat("model.rope_scaling: does not match ", path,
                                                     "'s rope scaling (leave it unset to take "
                                                     "the config's)"));
    }
    *model->mutable_rope_scaling() = hf.rope_scaling();
    if (!model->hf_model_type().empty() && model->hf_model_type() != hf.hf_model_type()) {
      return absl::InvalidArgumentError(
          absl::StrCat("model.hf_model_type: \"", model->hf_model_type(), "\" does not match ",
                       path, "'s model_type \"", hf.hf_model_type(), "\""));
    }
    model->set_hf_model_type(hf.hf_model_type());
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> HfModelType(const ModelSpec& m) {
  if (m.architecture() == ModelSpec::GPT) return std::string("gpt2");
  if (m.architecture() != ModelSpec::LLAMA) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.architecture: ", ModelSpec::Architecture_Name(m.architecture()),
                     " has no Hugging Face family (only GPT and LLAMA)"));
  }
  const bool qkv = m.attention_qkv_bias(), out = m.attention_out_bias(), norm = m.qk_norm();
  const bool window = m.sliding_window() > 0;
  std::string type = m.hf_model_type();
  if (type.empty()) {
    type = norm ? "qwen3" : (qkv && !out) ? "qwen2" : window ? "mistral" : "llama";
  }
  // What each family's transformers class can express.
  std::string why;
  if (type == "llama") {
    if (norm) why = "has no q/k norm";
    if (qkv != out) why = "biases q, k, v and o alike (attention_bias)";
    if (window) why = "has no sliding window";
  } else if (type == "qwen2") {
    if (!qkv || out) why = "biases q, k and v and not o";
    if (norm) why = "has no q/k norm";
    if (window) why = "has no sliding window (Shardline does not implement Qwen2's)";
  } else if (type == "qwen3") {
    if (!norm) why = "always has the q/k norm";
    if (qkv != out) why = "biases q, k, v and o alike (attention_bias)";
    if (window) why = "has no sliding window (Shardline does not implement Qwen3's)";
  } else if (type == "mistral") {
    if (qkv || out) why = "has no attention biases";
    if (norm) why = "has no q/k norm";
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.hf_model_type: \"", type, "\" is not one of llama, qwen2, qwen3, mistral"));
  }
  if (!why.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.hf_model_type: \"", type, "\" ", why, "; the model's attention_qkv_bias ", qkv,
        ", attention_out_bias ", out, ", qk_norm ", norm, ", sliding_window ", m.sliding_window(),
        " do not fit it"));
  }
  return type;
}

absl::StatusOr<std::string> HfConfigFromModelSpec(const ModelSpec& m) {
  if (m.architecture() == ModelSpec::LLAMA) {
    ASSIGN_OR_RETURN(std::string type, HfModelType(m));
    const char* cls = type == "llama"   ? "LlamaForCausalLM"
                      : type == "qwen2" ? "Qwen2ForCausalLM"
                      : type == "qwen3" ? "Qwen3ForCausalLM"
                                        : "MistralForCausalLM";
    const int64_t kv = m.n_kv_head() > 0 ? m.n_kv_head() : m.n_head();
    const int64_t head_dim = m.head_dim() > 0 ? m.head_dim() : m.n_embd() / m.n_head();
    const double theta = m.rope_theta() > 0 ? m.rope_theta() : 10000.0;
    const double eps = m.norm_eps() > 0 ? m.norm_eps() : 1e-5;
    // transformers 5 reads rope_parameters (type and theta together); 4.x reads rope_theta and,
    // for a scaling, rope_scaling. Both are written so either loads the same rotary embedding.
    const RopeScaling& r = m.rope_scaling();
    std::string scaling;
    switch (r.type()) {
      case RopeScaling::LINEAR:
        scaling = absl::StrCat("\"rope_type\": \"linear\", \"factor\": ", Num(r.factor()));
        break;
      case RopeScaling::DYNAMIC:
        scaling = absl::StrCat("\"rope_type\": \"dynamic\", \"factor\": ", Num(r.factor()));
        break;
      case RopeScaling::LLAMA3:
        scaling = absl::StrCat(
            "\"rope_type\": \"llama3\", \"factor\": ", Num(r.factor()),
            ", \"low_freq_factor\": ", Num(r.low_freq_factor()),
            ", \"high_freq_factor\": ", Num(r.high_freq_factor()),
            ", \"original_max_position_embeddings\": ", r.original_max_position_embeddings());
        break;
      default:
        break;
    }
    std::string family;  // The keys only some families' configs have.
    if (type == "llama") {
      family = absl::StrCat("  \"attention_bias\": ", m.attention_qkv_bias() ? "true" : "false",
                            ",\n  \"mlp_bias\": false,\n");
    } else if (type == "qwen2") {
      family = "  \"use_sliding_window\": false,\n";
    } else if (type == "qwen3") {
      family = absl::StrCat("  \"attention_bias\": ", m.attention_qkv_bias() ? "true" : "false",
                            ",\n  \"use_sliding_window\": false,\n");
    } else {
      family =
          absl::StrCat("  \"sliding_window\": ",
                       m.sliding_window() > 0 ? absl::StrCat(m.sliding_window()) : "null", ",\n");
    }
    return absl::StrCat(
        "{\n  \"architectures\": [\"", cls, "\"],\n  \"model_type\": \"", type, "\",\n",
        "  \"hidden_size\": ", m.n_embd(), ",\n  \"intermediate_size\": ", m.ffn_hidden(),
        ",\n  \"num_hidden_layers\": ", m.n_layer(), ",\n  \"num_attention_heads\": ", m.n_head(),
        ",\n  \"num_key_value_heads\": ", kv, ",\n  \"head_dim\": ", head_dim,
        ",\n  \"vocab_size\": ", m.vocab_size(),
        ",\n  \"max_position_embeddings\": ", m.block_size(), ",\n  \"rms_norm_eps\": ", Num(eps),
        ",\n  \"rope_theta\": ", Num(theta), ",\n",
        scaling.empty() ? "" : absl::StrCat("  \"rope_scaling\": {", scaling, "},\n"),
        "  \"rope_parameters\": {", scaling.empty() ? "\"rope_type\": \"default\"" : scaling,
        ", \"rope_theta\": ", Num(theta), "},\n  \"hidden_act\": \"silu\",\n", family,
        "  \"attention_dropout\": 0.0,\n",
        "  \"tie_word_embeddings\": ", m.tie_embeddings() ? "true" : "false",
        ",\n  \"torch_dtype\": \"float32\"\n}\n");
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
