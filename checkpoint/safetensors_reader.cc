#include "checkpoint/safetensors_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <map>
#include <utility>
#include <vector>

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include "absl/strings/str_cat.h"
#include "common/open_beneath.h"

namespace shardline::checkpoint {
namespace {

absl::Status Bad(const std::string& path, absl::string_view why) {
  return absl::DataLossError(absl::StrCat("safetensors file ", path, ": ", why));
}

// A JSON number that is a non-negative integer a double holds exactly; false otherwise.
bool AsCount(const google::protobuf::Value& v, int64_t* out) {
  if (v.kind_case() != google::protobuf::Value::kNumberValue) return false;
  const double d = v.number_value();
  if (!std::isfinite(d) || d < 0 || d > static_cast<double>(kMaxSafetensorsInteger) ||
      std::floor(d) != d) {
    return false;
  }
  *out = static_cast<int64_t>(d);
  return true;
}

std::string Describe(const google::protobuf::Value& v) {
  switch (v.kind_case()) {
    case google::protobuf::Value::kNumberValue:
      return absl::StrCat(v.number_value());
    case google::protobuf::Value::kStringValue:
      return "a string";
    case google::protobuf::Value::kBoolValue:
      return "a boolean";
    case google::protobuf::Value::kNullValue:
      return "null";
    case google::protobuf::Value::kListValue:
      return "a list";
    case google::protobuf::Value::kStructValue:
      return "an object";
    default:
      return "nothing";
  }
}

absl::StatusOr<SafetensorsEntry> ParseEntry(const std::string& name,
                                            const google::protobuf::Value& value,
                                            int64_t data_bytes, const std::string& path) {
  const std::string where = absl::StrCat("tensor ", name, ": ");
  if (!value.has_struct_value()) {
    return Bad(path, absl::StrCat(where, "entry is ", Describe(value), ", not an object"));
  }
  const auto& f = value.struct_value().fields();
  auto dt = f.find("dtype"), sh = f.find("shape"), off = f.find("data_offsets");
  for (const auto& [field, it] : {std::make_pair("dtype", dt), std::make_pair("shape", sh),
                                  std::make_pair("data_offsets", off)}) {
    if (it == f.end()) return Bad(path, absl::StrCat(where, "field ", field, " is missing"));
  }
  SafetensorsEntry t;
  t.name = name;
  if (dt->second.kind_case() != google::protobuf::Value::kStringValue) {
    return Bad(path,
               absl::StrCat(where, "field dtype is ", Describe(dt->second), ", not a string"));
  }
  t.dtype = dt->second.string_value();
  const int item = SafetensorsDtypeSize(t.dtype);
  if (item == 0) return Bad(path, absl::StrCat(where, "field dtype '", t.dtype, "' is unknown"));

  if (!sh->second.has_list_value()) {
    return Bad(path, absl::StrCat(where, "field shape is ", Describe(sh->second), ", not a list"));
  }
  const auto& dims = sh->second.list_value().values();
  if (dims.size() > kMaxSafetensorsDims) {
    return Bad(path, absl::StrCat(where, "field shape has ", dims.size(), " dimensions (at most ",
                                  kMaxSafetensorsDims, ")"));
  }
  // numel x item size must fit in int64: checked at every product.
  int64_t bytes = item;
  t.numel = 1;
  for (int i = 0; i < dims.size(); ++i) {
    int64_t d = 0;
    if (!AsCount(dims[i], &d)) {
      return Bad(path, absl::StrCat(where, "field shape[", i, "] is ", Describe(dims[i]),
                                    " (dimensions must be non-negative integers up to 2^53)"));
    }
    if (__builtin_mul_overflow(bytes, d, &bytes)) {
      return Bad(path, absl::StrCat(where, "field shape: the tensor's byte size overflows"));
    }
    t.numel *= d;  // <= bytes, so no overflow.
    t.shape.push_back(d);
  }

  if (!off->second.has_list_value() || off->second.list_value().values_size() != 2) {
    return Bad(path, absl::StrCat(where, "field data_offsets is ", Describe(off->second),
                                  ", not a list [begin, end]"));
  }
  const auto& o = off->second.list_value().values();
  if (!AsCount(o[0], &t.begin) || !AsCount(o[1], &t.end)) {
    return Bad(path, absl::StrCat(where, "field data_offsets [", Describe(o[0]), ", ",
                                  Describe(o[1]), "] are not non-negative integers up to 2^53"));
  }
  if (t.end < t.begin || t.end > data_bytes) {
    return Bad(path,
               absl::StrCat(where, "field data_offsets [", t.begin, ", ", t.end,
                            ") is not a range inside the data section of ", data_bytes, " bytes"));
  }
  if (t.end - t.begin != bytes) {
    return Bad(path,
               absl::StrCat(where, "field data_offsets [", t.begin, ", ", t.end, ") holds ",
                            t.end - t.begin, " bytes; shape and dtype ", t.dtype, " need ", bytes));
  }
  return t;
}

}  // namespace

int SafetensorsDtypeSize(absl::string_view dtype) {
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16") return 2;
  if (dtype == "I8" || dtype == "U8" || dtype == "BOOL") return 1;
  return 0;
}

absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(absl::string_view json, int64_t data_bytes,
                                                         const std::string& path) {
  google::protobuf::Struct header;
  const auto ps = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(json.data(), json.size()), &header);
  if (!ps.ok()) return Bad(path, absl::StrCat("header is not JSON: ", ps.ToString()));
  // In name order: protobuf's map iterates in an order that differs between parses, and with
  // several defects the error must not depend on it (found by //fuzz:safetensors_fuzzer).
  std::vector<std::pair<const std::string*, const google::protobuf::Value*>> fields;
  for (const auto& [name, value] : header.fields()) fields.emplace_back(&name, &value);
  std::sort(fields.begin(), fields.end(),
            [](const auto& a, const auto& b) { return *a.first < *b.first; });
  SafetensorsHeader out;
  for (const auto& [name_ptr, value_ptr] : fields) {
    const std::string& name = *name_ptr;
    const google::protobuf::Value& value = *value_ptr;
    if (name == "__metadata__") {
      if (!value.has_struct_value()) {
        return Bad(path,
                   absl::StrCat("field __metadata__ is ", Describe(value), ", not an object"));
      }
      std::map<std::string, const google::protobuf::Value*> meta;  // In key order, as above.
      for (const auto& [k, v] : value.struct_value().fields()) meta[k] = &v;
      for (const auto& [k, v] : meta) {
        if (v->kind_case() != google::protobuf::Value::kStringValue) {
          return Bad(
              path, absl::StrCat("field __metadata__.", k, " is ", Describe(*v), ", not a string"));
        }
        out.metadata[k] = v->string_value();
      }
      continue;
    }
    absl::StatusOr<SafetensorsEntry> t = ParseEntry(name, value, data_bytes, path);
    if (!t.ok()) return t.status();
    out.tensors.push_back(*std::move(t));
  }
  // No two tensors share a byte (the reference implementation refuses that too): by begin,
  // each must start at or after the end of the previous non-empty one.
  std::vector<const SafetensorsEntry*> by_begin;
  for (const SafetensorsEntry& t : out.tensors) {
    if (t.bytes() > 0) by_begin.push_back(&t);
  }
  std::sort(by_begin.begin(), by_begin.end(),
            [](const SafetensorsEntry* a, const SafetensorsEntry* b) {
              return a->begin != b->begin ? a->begin < b->begin : a->name < b->name;
            });
  for (size_t i = 1; i < by_begin.size(); ++i) {
    const SafetensorsEntry& a = *by_begin[i - 1];
    const SafetensorsEntry& b = *by_begin[i];
    if (b.begin < a.end) {
      return Bad(path,
                 absl::StrCat("tensor ", b.name, ": bytes [", b.begin, ", ", b.end,
                              ") overlap tensor ", a.name, "'s [", a.begin, ", ", a.end, ")"));
    }
  }
  return out;  // Already by name.
}

absl::StatusOr<std::unique_ptr<SafetensorsReader>> SafetensorsReader::Open(
    const std::string& path) {
  // Beneath the path policy's roots at the open (common/open_beneath.h).
  absl::StatusOr<int> opened = OpenForRead(path, "safetensors file");
  if (absl::IsNotFound(opened.status())) {
    return absl::NotFoundError(absl::StrCat("missing safetensors file ", path));
  }
  if (!opened.ok()) return opened.status();
  const int fd = *opened;
  auto fail = [fd](absl::Status s) {
    ::close(fd);
    return s;
  };
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    return fail(absl::InternalError(absl::StrCat("stat ", path, ": ", std::strerror(errno))));
  }
  if (!S_ISREG(st.st_mode)) return fail(Bad(path, "not a regular file"));
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  auto read_at = [&](char* dst, uint64_t n, uint64_t at) -> uint64_t {
    uint64_t done = 0;
    while (done < n) {
      const ssize_t got = ::pread(fd, dst + done, n - done, static_cast<off_t>(at + done));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) break;
      done += static_cast<uint64_t>(got);
    }
    return done;
  };
  unsigned char len[8];
  if (size < 8 || read_at(reinterpret_cast<char*>(len), 8, 0) != 8) {
    return fail(Bad(path, "shorter than its 8-byte header length"));
  }
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t{len[i]} << (8 * i);
  if (n > size - 8) {
    return fail(Bad(path, absl::StrCat("header length ", n, " is past the end of the file (", size,
                                       " bytes)")));
  }
  if (n > kMaxSafetensorsHeaderBytes) {
    return fail(Bad(path, absl::StrCat("header length ", n, " is over the limit of ",
                                       kMaxSafetensorsHeaderBytes, " bytes")));
  }
  std::string json(n, '\0');
  if (read_at(json.data(), n, 8) != n) {
    return fail(Bad(path, "the file ends inside its header (it shrank while being read)"));
  }
  const int64_t data_start = static_cast<int64_t>(8 + n);
  absl::StatusOr<SafetensorsHeader> header =
      ParseSafetensorsHeader(json, static_cast<int64_t>(size) - data_start, path);
  if (!header.ok()) return fail(header.status());
  return std::unique_ptr<SafetensorsReader>(
      new SafetensorsReader(path, fd, data_start, *std::move(header)));
}

SafetensorsReader::SafetensorsReader(std::string path, int fd, int64_t data_start,
                                     SafetensorsHeader header)
    : path_(std::move(path)), fd_(fd), data_start_(data_start), header_(std::move(header)) {}

SafetensorsReader::~SafetensorsReader() { ::close(fd_); }

const SafetensorsEntry* SafetensorsReader::Find(const std::string& name) const {
  auto it =
      std::lower_bound(header_.tensors.begin(), header_.tensors.end(), name,
                       [](const SafetensorsEntry& t, const std::string& n) { return t.name < n; });
  return it != header_.tensors.end() && it->name == name ? &*it : nullptr;
}

absl::Status SafetensorsReader::Read(const SafetensorsEntry& t, void* dst) const {
  return ReadBytes(t, 0, t.bytes(), dst);
}

absl::Status SafetensorsReader::ReadElements(const SafetensorsEntry& t, int64_t first,
                                             int64_t count, void* dst) const {
  if (first < 0 || count < 0 || first > t.numel || count > t.numel - first) {
    return absl::InvalidArgumentError(absl::StrCat("safetensors file ", path_, ": tensor ", t.name,
                                                   ": elements [", first, ", ", first + count,
                                                   ") outside [0, ", t.numel, ")"));
  }
  const int64_t size = SafetensorsDtypeSize(t.dtype);
  return ReadBytes(t, first * size, count * size, dst);
}

absl::Status SafetensorsReader::ReadBytes(const SafetensorsEntry& t, int64_t offset, int64_t n,
                                          void* dst) const {
  char* out = static_cast<char*>(dst);
  const int64_t start = data_start_ + t.begin + offset;
  int64_t done = 0;
  while (done < n) {
    const ssize_t got =
        ::pread(fd_, out + done, static_cast<size_t>(n - done), static_cast<off_t>(start + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      return absl::InternalError(absl::StrCat("read safetensors file ", path_, ": tensor ", t.name,
                                              ": ", std::strerror(errno)));
    }
    if (got == 0) {
      return absl::DataLossError(
          absl::StrCat("safetensors file ", path_, ": tensor ", t.name, ": the file ends at byte ",
                       start + done, ", inside the tensor's bytes [", data_start_ + t.begin, ", ",
                       data_start_ + t.end, ") (truncated after it was opened)"));
    }
    done += got;
  }
  return absl::OkStatus();
}

}  // namespace shardline::checkpoint
