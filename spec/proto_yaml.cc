#include "spec/proto_yaml.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/stubs/common.h>
#include <yaml-cpp/yaml.h>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"

namespace shardline::spec {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::EnumDescriptor;
using google::protobuf::EnumValueDescriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// Where the walker is: for error messages.
struct Context {
  std::string source;  // "job.yaml", or "" for --set values (no line numbers).
  std::string suffix;  // Appended to every error, e.g. " (from --set a=b)".
  FieldPaths* written = nullptr;
};

std::string JoinPath(absl::string_view prefix, absl::string_view name) {
  return prefix.empty() ? std::string(name) : absl::StrCat(prefix, ".", name);
}

absl::Status Error(const Context& ctx, const YAML::Node& node, absl::string_view text) {
  std::string where;
  if (!ctx.source.empty()) {
    const YAML::Mark mark = node.Mark();
    where = mark.line >= 0 ? absl::StrCat(ctx.source, ":", mark.line + 1, ": ")
                           : absl::StrCat(ctx.source, ": ");
  }
  return absl::InvalidArgumentError(absl::StrCat(where, text, ctx.suffix));
}

// How a node is quoted in messages: scalars in double quotes, other kinds by name.
std::string Describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Scalar:
      return absl::StrCat("\"", node.Scalar(), "\"");
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a mapping";
    default:
      return "an empty value";
  }
}

int EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<int> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = static_cast<int>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    int diag = row[0];
    row[0] = static_cast<int>(i);
    for (size_t j = 1; j <= b.size(); ++j) {
      const int up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// Names users bring from PyTorch FSDP/FSDP2, torchtitan, DeepSpeed and Hugging Face's Trainer
// for fields Shardline spells otherwise (or expresses through other fields). An unknown field
// with one of these names gets this hint instead of the nearest spelling, which for these is
// often wrong (`gradient_accumulation_steps` is closest to `steps`).
struct ForeignNames {
  const char* message;  // the JobSpec message's full name
  const char* names;    // the foreign names, lower case, separated by spaces
  const char* hint;     // the text inside the error's parentheses
};

constexpr ForeignNames kForeignNames[] = {
    {"shardline.FsdpSpec",
     "transformer_layer_cls transformer_layer_cls_to_wrap fsdp_transformer_layer_cls_to_wrap",
     "did you mean \"block_class\"? PyTorch FSDP's transformer_layer_cls: the block class's name"},
    {"shardline.FsdpSpec", "reshard_after_forward",
     "FSDP2's reshard_after_forward is \"sharding_strategy\": FULL_SHARD reshards after forward "
     "(True), SHARD_GRAD_OP keeps the parameters gathered until backward (False)"},
    {"shardline.FsdpSpec", "mp_policy mixed_precision_policy", "did you mean \"mixed_precision\"?"},
    {"shardline.FsdpSpec", "offload_policy offload_params", "did you mean \"cpu_offload\"?"},
    {"shardline.FsdpSpec", "gradient_checkpointing", "did you mean \"activation_checkpointing\"?"},
    {"shardline.TrainSpec", "gradient_accumulation_steps grad_accum_steps",
     "no such field: the micro-batches per step follow from train.global_batch_size / "
     "(train.micro_batch_size * world_size)"},
    {"shardline.TrainSpec", "batch_size",
     "did you mean \"global_batch_size\" (sequences per step, all ranks) or "
     "\"micro_batch_size\" (per rank per forward)?"},
    {"shardline.TrainSpec", "train_batch_size", "did you mean \"global_batch_size\"?"},
    {"shardline.TrainSpec", "train_micro_batch_size_per_gpu per_device_train_batch_size",
     "did you mean \"micro_batch_size\"?"},
    {"shardline.TrainSpec", "logging_steps log_interval log_freq", "did you mean \"log_every\"?"},
    {"shardline.TrainSpec", "eval_steps eval_interval", "did you mean \"eval_every\"?"},
    {"shardline.OptimizerSpec", "betas", "\"beta1\" and \"beta2\", two fields"},
    {"shardline.OptimizerSpec", "learning_rate", "did you mean \"lr\"?"},
    {"shardline.OptimizerSpec", "max_grad_norm max_norm gradient_clipping",
     "did you mean \"grad_clip\"?"},
    {"shardline.OptimizerSpec", "name type", "did you mean \"kind\"? (ADAMW or SGD)"},
    {"shardline.CheckpointSpec", "interval save_interval save_steps",
     "did you mean \"every_steps\"?"},
    {"shardline.CheckpointSpec", "folder path output_dir", "did you mean \"dir\"?"},
    {"shardline.CheckpointSpec", "resume_from_checkpoint",
     "did you mean \"resume_step\"? It resumes a step of this job's own checkpoints; another "
     "job's checkpoint: \"resume_from\"; weights only: \"init_from_safetensors\""},
    {"shardline.JobSpec", "nproc_per_node nnodes",
     "did you mean \"world_size\"? The total number of ranks (torchrun's nnodes x "
     "nproc_per_node); the coordinator places them"},
    {"shardline.ModelSpec", "hidden_size d_model dim", "did you mean \"n_embd\"?"},
    {"shardline.ModelSpec", "num_hidden_layers num_layers", "did you mean \"n_layer\"?"},
    {"shardline.ModelSpec", "num_attention_heads num_heads", "did you mean \"n_head\"?"},
    {"shardline.ModelSpec", "num_key_value_heads n_kv_heads", "did you mean \"n_kv_head\"?"},
    {"shardline.ModelSpec", "intermediate_size", "did you mean \"ffn_hidden\"?"},
    {"shardline.ModelSpec", "max_position_embeddings n_positions max_seq_len",
     "did you mean \"block_size\"?"},
};

// The parenthesised hint after `unknown field "PATH"`: a foreign name's hint, else the nearest
// spelling ("did you mean ...?"), else "" (MergeMessage then lists the known fields).
std::string UnknownFieldHint(const Descriptor& d, absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  for (const ForeignNames& f : kForeignNames) {
    if (d.full_name() != f.message) continue;
    for (absl::string_view foreign : absl::StrSplit(f.names, ' ')) {
      if (lower == foreign) return absl::StrCat(" (", f.hint, ")");
    }
  }
  const std::string suggestion = SuggestFieldName(d, name);
  return suggestion.empty() ? "" : absl::StrCat(" (did you mean \"", suggestion, "\"?)");
}

const FieldDescriptor* FindField(const Descriptor& d, absl::string_view name) {
  const std::string key(name);
  const FieldDescriptor* f = d.FindFieldByName(key);
  if (f == nullptr) f = d.FindFieldByCamelcaseName(key);
  return f;
}

absl::Status ParseInteger(const Context& ctx, const YAML::Node& node, const std::string& path,
                          int64_t lo, uint64_t hi, const char* type_name, uint64_t* out_u,
                          int64_t* out_s, bool is_unsigned) {
  if (!node.IsScalar()) {
    return Error(ctx, node, absl::StrCat(path, ": ", Describe(node), " is not an integer"));
  }
  const std::string& s = node.Scalar();
  int64_t sv = 0;
  uint64_t uv = 0;
  bool ok = false;
  bool negative = false;
  if (absl::SimpleAtoi(s, &sv)) {
    ok = true;
    negative = sv < 0;
    uv = negative ? 0 : static_cast<uint64_t>(sv);
  } else if (absl::SimpleAtoi(s, &uv)) {
    ok = true;  // Above INT64_MAX.
  } else {
    // Accept integral floats such as 1e6 (common for parameter counts).
    double d = 0;
    if (absl::SimpleAtod(s, &d) && std::isfinite(d) && d == std::floor(d)) {
      if (d < -9.2e18 || d > 1.8e19) {
        return Error(ctx, node,
                     absl::StrCat(path, ": \"", s, "\" is out of range for ", type_name));
      }
      ok = true;
      negative = d < 0;
      if (negative) {
        sv = static_cast<int64_t>(d);
      } else if (d < 9.2e18) {
        sv = static_cast<int64_t>(d);
        uv = static_cast<uint64_t>(d);
      } else {
        uv = static_cast<uint64_t>(d);
        sv = std::numeric_limits<int64_t>::max();
      }
    }
  }
  if (!ok) {
    return Error(ctx, node, absl::StrCat(path, ": \"", s, "\" is not an integer"));
  }
  const bool out_of_range = negative ? (sv < lo) : (uv > hi);
  if (out_of_range) {
    return Error(ctx, node, absl::StrCat(path, ": \"", s, "\" is out of range for ", type_name));
  }
  if (is_unsigned) {
    *out_u = uv;
  } else {
    *out_s = negative ? sv : static_cast<int64_t>(uv);
  }
  return absl::OkStatus();
}

absl::Status ParseEnum(const Context& ctx, const YAML::Node& node, const std::string& path,
                       const EnumDescriptor& e, const EnumValueDescriptor** out) {
  std::vector<std::string> names;
  for (int i = 0; i < e.value_count(); ++i) {
    if (e.value(i)->number() != 0) names.push_back(e.value(i)->name());
  }
  if (node.IsScalar()) {
    const std::string upper = absl::AsciiStrToUpper(node.Scalar());
    const EnumValueDescriptor* v = e.FindValueByName(upper);
    if (v != nullptr) {
      *out = v;
      return absl::OkStatus();
    }
  }
  return Error(
      ctx, node,
      absl::StrCat(path, ": ", Describe(node), " is not one of ", absl::StrJoin(names, ", ")));
}

absl::Status MergeMessage(const Context& ctx, const YAML::Node& node, const std::string& path,
                          Message* message);

// SetValue for the integer fields (int32, int64, uint32, uint64).
absl::Status SetInteger(const Context& ctx, const YAML::Node& node, const std::string& path,
                        const FieldDescriptor& f, Message* message) {
  const Reflection& r = *message->GetReflection();
  const bool rep = f.is_repeated();
  if (f.cpp_type() == FieldDescriptor::CPPTYPE_INT32 ||
      f.cpp_type() == FieldDescriptor::CPPTYPE_INT64) {
    const bool is32 = f.cpp_type() == FieldDescriptor::CPPTYPE_INT32;
    int64_t v = 0;
    uint64_t unused = 0;
    RETURN_IF_ERROR(ParseInteger(
        ctx, node, path,
        is32 ? std::numeric_limits<int32_t>::min() : std::numeric_limits<int64_t>::min(),
        is32 ? std::numeric_limits<int32_t>::max() : std::numeric_limits<int64_t>::max(),
        is32 ? "int32" : "int64", &unused, &v, /*is_unsigned=*/false));
    if (is32) {
      rep ? r.AddInt32(message, &f, static_cast<int32_t>(v))
          : r.SetInt32(message, &f, static_cast<int32_t>(v));
    } else {
      rep ? r.AddInt64(message, &f, v) : r.SetInt64(message, &f, v);
    }
    return absl::OkStatus();
  }
  const bool is32 = f.cpp_type() == FieldDescriptor::CPPTYPE_UINT32;
  uint64_t v = 0;
  int64_t unused = 0;
  RETURN_IF_ERROR(ParseInteger(
      ctx, node, path, 0,
      is32 ? std::numeric_limits<uint32_t>::max() : std::numeric_limits<uint64_t>::max(),
      is32 ? "uint32" : "uint64", &v, &unused, /*is_unsigned=*/true));
  if (is32) {
    rep ? r.AddUInt32(message, &f, static_cast<uint32_t>(v))
        : r.SetUInt32(message, &f, static_cast<uint32_t>(v));
  } else {
    rep ? r.AddUInt64(message, &f, v) : r.SetUInt64(message, &f, v);
  }
  return absl::OkStatus();
}

// SetValue for the float and double fields.
absl::Status SetFloatingPoint(const Context& ctx, const YAML::Node& node, const std::string& path,
                              const FieldDescriptor& f, Message* message) {
  const Reflection& r = *message->GetReflection();
  const bool rep = f.is_repeated();
  double d = 0;
  float fl = 0;
  const bool is_float = f.cpp_type() == FieldDescriptor::CPPTYPE_FLOAT;
  const bool ok = node.IsScalar() && (is_float ? absl::SimpleAtof(node.Scalar(), &fl)
                                               : absl::SimpleAtod(node.Scalar(), &d));
  if (!ok) {
    return Error(ctx, node, absl::StrCat(path, ": ", Describe(node), " is not a number"));
  }
  if (is_float) {
    rep ? r.AddFloat(message, &f, fl) : r.SetFloat(message, &f, fl);
  } else {
    rep ? r.AddDouble(message, &f, d) : r.SetDouble(message, &f, d);
  }
  return absl::OkStatus();
}

// Sets one (singular) field, or appends to a repeated one when `repeated`.
absl::Status SetValue(const Context& ctx, const YAML::Node& node, const std::string& path,
                      const FieldDescriptor& f, Message* message) {
  const Reflection& r = *message->GetReflection();
  const bool rep = f.is_repeated();
  if (node.IsNull() || !node.IsDefined()) {
    return Error(ctx, node, absl::StrCat(path, ": has no value"));
  }
  switch (f.cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
    case FieldDescriptor::CPPTYPE_INT64:
    case FieldDescriptor::CPPTYPE_UINT32:
    case FieldDescriptor::CPPTYPE_UINT64:
      return SetInteger(ctx, node, path, f, message);
    case FieldDescriptor::CPPTYPE_FLOAT:
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return SetFloatingPoint(ctx, node, path, f, message);
    case FieldDescriptor::CPPTYPE_BOOL: {
      bool b = false;
      bool ok = false;
      if (node.IsScalar()) {
        const std::string s = absl::AsciiStrToLower(node.Scalar());
        if (s == "true" || s == "yes" || s == "on") ok = true, b = true;
        if (s == "false" || s == "no" || s == "off") ok = true, b = false;
      }
      if (!ok) {
        return Error(ctx, node,
                     absl::StrCat(path, ": ", Describe(node), " is not a boolean (true/false)"));
      }
      rep ? r.AddBool(message, &f, b) : r.SetBool(message, &f, b);
      return absl::OkStatus();
    }
    case FieldDescriptor::CPPTYPE_STRING: {
      if (!node.IsScalar()) {
        return Error(ctx, node, absl::StrCat(path, ": ", Describe(node), " is not a string"));
      }
      // proto3 string fields must hold UTF-8: anything else would not survive serialization
      // (the coordinator could not parse a submitted spec). Found by //fuzz:job_spec_fuzzer.
      if (f.type() == FieldDescriptor::TYPE_STRING &&
          !google::protobuf::internal::IsStructurallyValidUTF8(node.Scalar().data(),
                                                               node.Scalar().size())) {
        return Error(ctx, node, absl::StrCat(path, ": is not valid UTF-8 text"));
      }
      rep ? r.AddString(message, &f, node.Scalar()) : r.SetString(message, &f, node.Scalar());
      return absl::OkStatus();
    }
    case FieldDescriptor::CPPTYPE_ENUM: {
      const EnumValueDescriptor* v = nullptr;
      RETURN_IF_ERROR(ParseEnum(ctx, node, path, *f.enum_type(), &v));
      rep ? r.AddEnum(message, &f, v) : r.SetEnum(message, &f, v);
      return absl::OkStatus();
    }
    case FieldDescriptor::CPPTYPE_MESSAGE: {
      Message* sub = rep ? r.AddMessage(message, &f) : r.MutableMessage(message, &f);
      return MergeMessage(ctx, node, path, sub);
    }
  }
  return Error(ctx, node, absl::StrCat(path, ": unsupported field type"));
}

absl::Status SetField(const Context& ctx, const YAML::Node& node, const std::string& path,
                      const FieldDescriptor& f, Message* message) {
  if (ctx.written != nullptr) ctx.written->insert(path);
  if (!f.is_repeated()) return SetValue(ctx, node, path, f, message);
  if (!node.IsSequence()) {
    return Error(ctx, node, absl::StrCat(path, ": ", Describe(node), " is not a list"));
  }
  message->GetReflection()->ClearField(message, &f);
  for (size_t i = 0; i < node.size(); ++i) {
    RETURN_IF_ERROR(SetValue(ctx, node[i], absl::StrCat(path, "[", i, "]"), f, message));
  }
  return absl::OkStatus();
}

absl::Status MergeMessage(const Context& ctx, const YAML::Node& node, const std::string& path,
                          Message* message) {
  const Descriptor& d = *message->GetDescriptor();
  if (!node.IsMap()) {
    const std::string what = path.empty() ? "the document" : path;
    return Error(
        ctx, node,
        absl::StrCat(what, ": ", Describe(node), " is not a mapping of field names to values"));
  }
  std::set<std::string> seen;
  for (auto it = node.begin(); it != node.end(); ++it) {
    // A copy (a Node is a handle): yaml-cpp's operator-> returns a temporary proxy, so a
    // reference to it->first dangles after this statement (found by //fuzz:job_spec_fuzzer).
    const YAML::Node key = it->first;
    if (!key.IsScalar()) {
      return Error(
          ctx, key,
          absl::StrCat(path.empty() ? "the document" : path, ": a key is not a plain name"));
    }
    const std::string& name = key.Scalar();
    const std::string field_path = JoinPath(path, name);
    const FieldDescriptor* f = FindField(d, name);
    if (f == nullptr) {
      std::string hint = UnknownFieldHint(d, name);
      if (hint.empty()) {
        std::vector<std::string> names;
        for (int i = 0; i < d.field_count(); ++i) names.push_back(d.field(i)->name());
        hint = absl::StrCat(" (known: ", absl::StrJoin(names, ", "), ")");
      }
      return Error(ctx, key, absl::StrCat("unknown field \"", field_path, "\"", hint));
    }
    if (!seen.insert(f->name()).second) {
      return Error(ctx, key, absl::StrCat(JoinPath(path, f->name()), ": given twice"));
    }
    if (it->second.IsNull()) {  // Report at the key: a null value's mark is the next line.
      return Error(ctx, key, absl::StrCat(JoinPath(path, f->name()), ": has no value"));
    }
    RETURN_IF_ERROR(SetField(ctx, it->second, JoinPath(path, f->name()), *f, message));
  }
  return absl::OkStatus();
}

// The shortest %g form that parses back to the same value (0.1, not 0.10000000000000001).
std::string FormatDouble(double v) {
  char buf[64];
  for (int digits = 6; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof(buf), "%.*g", digits, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

std::string FormatFloat(float v) {
  char buf[64];
  for (int digits = 6; digits <= 9; ++digits) {
    std::snprintf(buf, sizeof(buf), "%.*g", digits, static_cast<double>(v));
    if (std::strtof(buf, nullptr) == v) break;
  }
  return buf;
}

void EmitScalar(YAML::Emitter& out, const Message& m, const FieldDescriptor& f, int index) {
  const Reflection& r = *m.GetReflection();
  const bool rep = f.is_repeated();
  switch (f.cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      out << (rep ? r.GetRepeatedInt32(m, &f, index) : r.GetInt32(m, &f));
      break;
    case FieldDescriptor::CPPTYPE_INT64:
      out << (rep ? r.GetRepeatedInt64(m, &f, index) : r.GetInt64(m, &f));
      break;
    case FieldDescriptor::CPPTYPE_UINT32:
      out << (rep ? r.GetRepeatedUInt32(m, &f, index) : r.GetUInt32(m, &f));
      break;
    case FieldDescriptor::CPPTYPE_UINT64:
      out << (rep ? r.GetRepeatedUInt64(m, &f, index) : r.GetUInt64(m, &f));
      break;
    case FieldDescriptor::CPPTYPE_FLOAT:
      out << FormatFloat(rep ? r.GetRepeatedFloat(m, &f, index) : r.GetFloat(m, &f));
      break;
    case FieldDescriptor::CPPTYPE_DOUBLE:
      out << FormatDouble(rep ? r.GetRepeatedDouble(m, &f, index) : r.GetDouble(m, &f));
      break;
    case FieldDescriptor::CPPTYPE_BOOL:
      out << ((rep ? r.GetRepeatedBool(m, &f, index) : r.GetBool(m, &f)) ? "true" : "false");
      break;
    case FieldDescriptor::CPPTYPE_STRING:
      out << YAML::DoubleQuoted << (rep ? r.GetRepeatedString(m, &f, index) : r.GetString(m, &f));
      break;
    case FieldDescriptor::CPPTYPE_ENUM:
      out << (rep ? r.GetRepeatedEnum(m, &f, index) : r.GetEnum(m, &f))->name();
      break;
    case FieldDescriptor::CPPTYPE_MESSAGE:
      break;  // Handled by EmitMessage.
  }
}

void EmitMessage(YAML::Emitter& out, const Message& m) {
  const Reflection& r = *m.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  r.ListFields(m, &fields);  // Set fields only (proto3: non-zero), in field-number order.
  out << YAML::BeginMap;
  for (const FieldDescriptor* f : fields) {
    out << YAML::Key << f->name() << YAML::Value;
    if (f->is_repeated()) {
      out << YAML::BeginSeq;
      for (int i = 0; i < r.FieldSize(m, f); ++i) {
        if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
          EmitMessage(out, r.GetRepeatedMessage(m, f, i));
        } else {
          EmitScalar(out, m, *f, i);
        }
      }
      out << YAML::EndSeq;
    } else if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      EmitMessage(out, r.GetMessage(m, f));
    } else {
      EmitScalar(out, m, *f, -1);
    }
  }
  out << YAML::EndMap;
}

}  // namespace

std::string SuggestFieldName(const Descriptor& descriptor, absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  std::string best;
  int best_score = std::numeric_limits<int>::max();
  for (int i = 0; i < descriptor.field_count(); ++i) {
    const std::string& candidate = descriptor.field(i)->name();
    int score = EditDistance(lower, candidate);
    const bool contains = lower.size() >= 3 && (candidate.find(lower) != std::string::npos ||
                                                lower.find(candidate) != std::string::npos);
    const int limit = std::max<int>(2, static_cast<int>(lower.size()) / 3);
    if (!contains && score > limit) continue;
    if (contains) score -= 100;  // A substring match beats any near-miss spelling.
    if (score < best_score) {
      best_score = score;
      best = candidate;
    }
  }
  return best;
}

absl::Status MergeYamlText(absl::string_view text, absl::string_view source, Message* message,
                           FieldPaths* written) {
  Context ctx;
  ctx.source = source.empty() ? std::string("<spec>") : std::string(source);
  ctx.written = written;
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(ctx.source, ":", e.mark.line + 1, ": not valid YAML or JSON: ", e.msg));
  }
  if (root.IsNull()) return absl::OkStatus();  // An empty document sets nothing.
  try {
    return MergeMessage(ctx, root, "", message);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(ctx.source, ": ", e.what()));
  }
}

absl::Status ApplyAssignment(absl::string_view assignment, Message* message, FieldPaths* written) {
  const size_t eq = assignment.find('=');
  if (eq == absl::string_view::npos || eq == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--set \"", assignment, "\": expected path=value, e.g. fsdp.hybrid_shard_degree=2"));
  }
  const std::string path(absl::StripAsciiWhitespace(assignment.substr(0, eq)));
  const std::string value(assignment.substr(eq + 1));
  Context ctx;
  ctx.suffix = absl::StrCat(" (from --set ", assignment, ")");
  ctx.written = written;

  // Walk to the parent message of the last path element.
  Message* current = message;
  std::string walked;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string name = path.substr(start, dot == std::string::npos ? dot : dot - start);
    const Descriptor& d = *current->GetDescriptor();
    const FieldDescriptor* f = FindField(d, name);
    const std::string field_path = JoinPath(walked, f != nullptr ? f->name() : name);
    if (f == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unknown field \"", field_path, "\"",
                                                     UnknownFieldHint(d, name), ctx.suffix));
    }
    if (dot == std::string::npos) {
      YAML::Node node;
      try {
        node = value.empty() ? YAML::Node(std::string()) : YAML::Load(value);
      } catch (const YAML::Exception& e) {
        return absl::InvalidArgumentError(absl::StrCat(
            field_path, ": \"", value, "\" is not a valid value: ", e.msg, ctx.suffix));
      }
      // A string field takes the text as written (so `name=007` stays "007").
      if (f->cpp_type() == FieldDescriptor::CPPTYPE_STRING && !f->is_repeated()) {
        node = YAML::Node(value);
      }
      return SetField(ctx, node, field_path, *f, current);
    }
    if (f->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE || f->is_repeated()) {
      return absl::InvalidArgumentError(absl::StrCat(field_path, ": is not a section, so \"", path,
                                                     "\" names nothing", ctx.suffix));
    }
    current = current->GetReflection()->MutableMessage(current, f);
    walked = field_path;
    start = dot + 1;
  }
}

std::string MessageToYaml(const Message& message) {
  YAML::Emitter out;
  EmitMessage(out, message);
  return std::string(out.c_str()) + "\n";
}

}  // namespace shardline::spec
