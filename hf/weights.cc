#include "hf/weights.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <tuple>

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "checkpoint/durable_file.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/safetensors_reader.h"
#include "common/status_macros.h"
#include "hf/weight_map.h"
#include "spec/hf_config.h"

namespace shardline::hf {
namespace {

using checkpoint::SafetensorsEntry;
using checkpoint::SafetensorsReader;

float HalfToFloat(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ffu, bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // Subnormal: normalise.
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --exp;
      }
      bits = sign | (exp << 23) | ((mant & 0x3ffu) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// The safetensors files of a folder: one, or those an index names; tensor name -> reader.
class Files {
 public:
  static absl::StatusOr<Files> Open(const std::string& dir) {
    Files f;
    const std::string single = absl::StrCat(dir, "/model.safetensors");
    const std::string index = absl::StrCat(dir, "/model.safetensors.index.json");
    absl::StatusOr<std::string> json = spec::ReadSmallJsonFile(index);
    if (!json.ok()) {
      if (json.status().code() != absl::StatusCode::kNotFound) return json.status();
      ASSIGN_OR_RETURN(auto reader, SafetensorsReader::Open(single));
      for (const SafetensorsEntry& e : reader->tensors()) f.where_[e.name] = reader.get();
      f.readers_.push_back(std::move(reader));
      return f;
    }
    google::protobuf::Struct s;
    const auto parsed = google::protobuf::util::JsonStringToMessage(
        google::protobuf::StringPiece(json->data(), json->size()), &s);
    auto map = s.fields().find("weight_map");
    if (!parsed.ok() || map == s.fields().end() ||
        map->second.kind_case() != google::protobuf::Value::kStructValue) {
      return absl::InvalidArgumentError(
          absl::StrCat(index, ": not a JSON object with a \"weight_map\" object"));
    }
    std::map<std::string, SafetensorsReader*> by_file;
    for (const auto& [tensor, file] : map->second.struct_value().fields()) {
      if (file.kind_case() != google::protobuf::Value::kStringValue) {
        return absl::InvalidArgumentError(
            absl::StrCat(index, ": weight_map[\"", tensor, "\"] is not a file name"));
      }
      const std::string& name = file.string_value();
      if (name.empty() || absl::StrContains(name, "/") || name == "." || name == "..") {
        return absl::InvalidArgumentError(
            absl::StrCat(index, ": weight_map[\"", tensor, "\"] = \"", name,
                         "\" is not a plain file name in the folder"));
      }
      auto it = by_file.find(name);
      if (it == by_file.end()) {
        ASSIGN_OR_RETURN(auto reader, SafetensorsReader::Open(absl::StrCat(dir, "/", name)));
        it = by_file.emplace(name, reader.get()).first;
        f.readers_.push_back(std::move(reader));
      }
      f.where_[tensor] = it->second;
    }
    return f;
  }

  // The entry and its reader, or {nullptr, nullptr}.
  std::pair<const SafetensorsEntry*, const SafetensorsReader*> Find(const std::string& name) const {
    auto it = where_.find(name);
    if (it == where_.end()) return {nullptr, nullptr};
    const SafetensorsEntry* e = it->second->Find(name);
    return {e, e == nullptr ? nullptr : it->second};
  }

  absl::StatusOr<std::vector<float>> ReadFloats(const SafetensorsEntry& e,
                                                const SafetensorsReader& r) const {
    std::vector<float> out(static_cast<size_t>(e.numel));
    if (e.dtype == "F32") {
      RETURN_IF_ERROR(r.Read(e, out.data()));
      return out;
    }
    if (e.dtype != "BF16" && e.dtype != "F16") {
      return absl::InvalidArgumentError(absl::StrCat(r.path(), ": tensor ", e.name, " is ", e.dtype,
                                                     "; only F32, F16 and BF16 are read"));
    }
    std::vector<uint16_t> raw(static_cast<size_t>(e.numel));
    RETURN_IF_ERROR(r.Read(e, raw.data()));
    for (size_t i = 0; i < raw.size(); ++i) {
      if (e.dtype == "BF16") {
        const uint32_t bits = static_cast<uint32_t>(raw[i]) << 16;
        std::memcpy(&out[i], &bits, 4);
      } else {
        out[i] = HalfToFloat(raw[i]);
      }
    }
    return out;
  }

 private:
  std::vector<std::unique_ptr<SafetensorsReader>> readers_;
  std::map<std::string, const SafetensorsReader*> where_;
};

// Our shape of each parameter (as the models create them).
std::vector<int64_t> OurShape(const TensorMapping& m, const std::vector<int64_t>& file_shape) {
  if (m.layout == Layout::kTransposed && file_shape.size() == 2) {
    return {file_shape[1], file_shape[0]};
  }
  return file_shape;
}

absl::Status CheckShape(const TensorMapping& m, const std::vector<int64_t>& our_shape,
                        const std::string& where) {
  if (m.layout == Layout::kSame) return absl::OkStatus();
  if (our_shape.size() != 2 && !(m.layout == Layout::kRotaryHalves && our_shape.size() == 1)) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": tensor ", m.hf_name, " has ",
                                                   our_shape.size(),
                                                   " dimensions; a projection has 2"));
  }
  if (m.layout == Layout::kRotaryHalves &&
      (m.heads <= 0 || our_shape[0] % m.heads != 0 || (our_shape[0] / m.heads) % 2 != 0)) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": tensor ", m.hf_name, " has ",
                                                   our_shape[0], " rows, not ", m.heads,
                                                   " heads of an even size"));
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<int64_t> FileShape(const TensorMapping& m, const std::vector<int64_t>& our_shape) {
  if (m.layout == Layout::kTransposed && our_shape.size() == 2) {
    return {our_shape[1], our_shape[0]};
  }
  return our_shape;
}

std::vector<float> ToOurs(const TensorMapping& m, const std::vector<int64_t>& s,
                          const std::vector<float>& in) {
  if (m.layout == Layout::kSame) return in;
  std::vector<float> out(in.size());
  const int64_t rows = s[0], cols = s.size() == 2 ? s[1] : 1;
  if (m.layout == Layout::kTransposed) {  // file [cols, rows] -> ours [rows, cols]
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = in[c * rows + r];
    }
    return out;
  }
  const int64_t d = rows / m.heads, half = d / 2;
  for (int64_t h = 0; h < m.heads; ++h) {
    for (int64_t i = 0; i < half; ++i) {
      for (int64_t j = 0; j < 2; ++j) {
        const float* src = &in[(h * d + j * half + i) * cols];
        std::memcpy(&out[(h * d + 2 * i + j) * cols], src, sizeof(float) * cols);
      }
    }
  }
  return out;
}

std::vector<float> FromOurs(const TensorMapping& m, const std::vector<int64_t>& s,
                            const std::vector<float>& in) {
  if (m.layout == Layout::kSame) return in;
  std::vector<float> out(in.size());
  const int64_t rows = s[0], cols = s.size() == 2 ? s[1] : 1;
  if (m.layout == Layout::kTransposed) {  // ours [rows, cols] -> file [cols, rows]
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) out[c * rows + r] = in[r * cols + c];
    }
    return out;
  }
  const int64_t d = rows / m.heads, half = d / 2;
  for (int64_t h = 0; h < m.heads; ++h) {
    for (int64_t i = 0; i < half; ++i) {
      for (int64_t j = 0; j < 2; ++j) {
        const float* src = &in[(h * d + 2 * i + j) * cols];
        std::memcpy(&out[(h * d + j * half + i) * cols], src, sizeof(float) * cols);
      }
    }
  }
  return out;
}

std::vector<TensorMapping> MappingFor(const ModelSpec& model) {
  if (model.architecture() == ModelSpec::LLAMA) return LlamaMapping(model);
  if (model.architecture() == ModelSpec::GPT) return Gpt2Mapping(model);
  return {};
}

absl::Status ForEachHfWeight(
    const std::string& hf_dir,
    const std::function<absl::Status(const std::string& our_name, const HostTensor& t)>& visit) {
  const std::string config_path = absl::StrCat(hf_dir, "/config.json");
  ASSIGN_OR_RETURN(std::string json, spec::ReadSmallJsonFile(config_path));
  ASSIGN_OR_RETURN(ModelSpec model, spec::ModelSpecFromHfConfig(json, config_path));
  ASSIGN_OR_RETURN(Files files, Files::Open(hf_dir));
  // Every tensor found and its shape checked first, so a bad folder fails before any reading.
  struct Found {
    const TensorMapping* mapping;
    const SafetensorsEntry* entry;
    const SafetensorsReader* reader;
    std::vector<int64_t> shape;  // Ours.
  };
  const std::vector<TensorMapping> mappings = MappingFor(model);
  std::vector<Found> found;
  for (const TensorMapping& m : mappings) {
    auto [entry, reader] = files.Find(m.hf_name);
    for (size_t i = 0; entry == nullptr && i < m.other_names.size(); ++i) {
      std::tie(entry, reader) = files.Find(m.other_names[i]);
    }
    if (entry == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(hf_dir, ": tensor ", m.hf_name, " (our ", m.ours, ") is missing"));
    }
    std::vector<int64_t> shape = OurShape(m, entry->shape);
    RETURN_IF_ERROR(CheckShape(m, shape, reader->path()));
    found.push_back({&m, entry, reader, std::move(shape)});
  }
  for (const Found& f : found) {
    HostTensor t;
    t.shape = f.shape;
    ASSIGN_OR_RETURN(std::vector<float> values, files.ReadFloats(*f.entry, *f.reader));
    t.values = ToOurs(*f.mapping, t.shape, values);
    RETURN_IF_ERROR(visit(f.mapping->ours, t));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::map<std::string, HostTensor>> ReadHfWeights(const std::string& hf_dir) {
  std::map<std::string, HostTensor> out;
  RETURN_IF_ERROR(ForEachHfWeight(hf_dir, [&](const std::string& name, const HostTensor& t) {
    out[name] = t;
    return absl::OkStatus();
  }));
  return out;
}

absl::Status WriteHfFolder(
    const std::string& out_dir, const std::string& config_json,
    const std::function<absl::StatusOr<HostTensor>(const std::string& our_name)>& get) {
  ASSIGN_OR_RETURN(ModelSpec model,
                   spec::ModelSpecFromHfConfig(config_json, "exported config.json"));
  RETURN_IF_ERROR(checkpoint::MakeDirsDurable(out_dir));
  std::vector<checkpoint::SafetensorsTensor> tensors;
  for (const TensorMapping& m : MappingFor(model)) {
    if (!m.exported) continue;
    ASSIGN_OR_RETURN(HostTensor t, get(m.ours));
    RETURN_IF_ERROR(CheckShape(m, t.shape, m.ours));
    const std::vector<float> values = FromOurs(m, t.shape, t.values);
    checkpoint::SafetensorsTensor st;
    st.name = m.hf_name;
    st.dtype = "F32";
    st.shape = FileShape(m, t.shape);
    st.data.assign(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
    tensors.push_back(std::move(st));
  }
  std::sort(tensors.begin(), tensors.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  RETURN_IF_ERROR(checkpoint::WriteSafetensors(absl::StrCat(out_dir, "/model.safetensors"), tensors,
                                               {{"format", "pt"}}));
  return checkpoint::WriteFileAtomic(absl::StrCat(out_dir, "/config.json"), config_json);
}

}  // namespace shardline::hf
