#include "checkpoint/torch_archive.h"

#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "checkpoint/float_formats.h"
#include "checkpoint/pickle.h"

namespace shardline::checkpoint {
namespace {

uint64_t Le(absl::string_view b, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(b[at + i]);
  return v;
}

constexpr uint32_t kEndOfDirectory = 0x06054b50;
constexpr uint32_t kDirectoryEntry = 0x02014b50;
constexpr uint32_t kLocalHeader = 0x04034b50;
constexpr size_t kEndOfDirectorySize = 22;
constexpr size_t kDirectoryEntrySize = 46;
constexpr size_t kLocalHeaderSize = 30;

absl::Status Malformed(absl::string_view what, absl::string_view why) {
  return absl::DataLossError(absl::StrCat(what, ": not a readable torch.save archive: ", why));
}

// The persistent id ("storage", torch.<Type>Storage, key, location, numel) -> dtype and key.
absl::Status StorageOf(const Pickle& p, int pid, absl::string_view what, TorchDtype* dtype,
                       std::string* key, int64_t* numel) {
  if (pid < 0 || p.node(pid).kind != PickleKind::kPersistentId) {
    return absl::InvalidArgumentError(absl::StrCat(what,
                                                   ": the tensor's storage is not a saved "
                                                   "storage reference"));
  }
  const PickleNode& id = p.node(p.node(pid).items[0]);
  if (id.kind != PickleKind::kTuple || id.items.size() != 5 || p.String(id.items[0]) == nullptr ||
      *p.String(id.items[0]) != "storage" || p.String(id.items[2]) == nullptr ||
      !p.Int(id.items[4], numel)) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": unexpected storage reference"));
  }
  const std::string type = p.ClassName(id.items[1]);
  if (!absl::StartsWith(type, "torch.") || !TorchDtypeFromName(type.substr(6), dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": storage type \"", type,
                     "\" (read: torch.FloatStorage, DoubleStorage, HalfStorage, BFloat16Storage)"));
  }
  *key = *p.String(id.items[2]);
  return absl::OkStatus();
}

}  // namespace

int TorchDtypeSize(TorchDtype d) {
  switch (d) {
    case TorchDtype::kFloat64:
      return 8;
    case TorchDtype::kFloat32:
      return 4;
    case TorchDtype::kFloat16:
    case TorchDtype::kBFloat16:
      return 2;
  }
  return 4;
}

bool TorchDtypeFromName(absl::string_view name, TorchDtype* out) {
  absl::ConsumePrefix(&name, "torch.");
  if (name == "float32" || name == "float" || name == "FloatStorage") {
    *out = TorchDtype::kFloat32;
  } else if (name == "float64" || name == "double" || name == "DoubleStorage") {
    *out = TorchDtype::kFloat64;
  } else if (name == "float16" || name == "half" || name == "HalfStorage") {
    *out = TorchDtype::kFloat16;
  } else if (name == "bfloat16" || name == "BFloat16Storage") {
    *out = TorchDtype::kBFloat16;
  } else {
    return false;
  }
  return true;
}

absl::StatusOr<std::vector<std::pair<std::string, absl::string_view>>> ReadStoredZip(
    absl::string_view zip, absl::string_view what) {
  if (zip.size() < kEndOfDirectorySize) return Malformed(what, "shorter than a zip directory");
  // The end-of-directory record: the last one, within its largest comment of the end.
  size_t eocd = std::string::npos;
  const size_t lowest =
      zip.size() > kEndOfDirectorySize + 0xFFFF ? zip.size() - kEndOfDirectorySize - 0xFFFF : 0;
  for (size_t at = zip.size() - kEndOfDirectorySize + 1; at-- > lowest;) {
    if (Le(zip, at, 4) == kEndOfDirectory) {
      eocd = at;
      break;
    }
  }
  if (eocd == std::string::npos) return Malformed(what, "no zip end-of-directory record");
  const uint64_t entries = Le(zip, eocd + 10, 2);
  const uint64_t dir_size = Le(zip, eocd + 12, 4);
  const uint64_t dir_at = Le(zip, eocd + 16, 4);
  if (entries == 0xFFFF || dir_size == 0xFFFFFFFF || dir_at == 0xFFFFFFFF) {
    return Malformed(what, "a zip64 archive (an entry past 4 GiB) is not read");
  }
  if (dir_at > eocd || dir_size > eocd - dir_at) return Malformed(what, "directory out of range");
  std::vector<std::pair<std::string, absl::string_view>> out;
  size_t at = dir_at;
  for (uint64_t i = 0; i < entries; ++i) {
    if (at + kDirectoryEntrySize > eocd || Le(zip, at, 4) != kDirectoryEntry) {
      return Malformed(what, absl::StrCat("directory entry ", i, " is malformed"));
    }
    const uint64_t method = Le(zip, at + 10, 2);
    const uint64_t packed = Le(zip, at + 20, 4);
    const uint64_t size = Le(zip, at + 24, 4);
    const uint64_t name_len = Le(zip, at + 28, 2);
    const uint64_t extra_len = Le(zip, at + 30, 2);
    const uint64_t comment_len = Le(zip, at + 32, 2);
    const uint64_t local = Le(zip, at + 42, 4);
    const size_t next = at + kDirectoryEntrySize + name_len + extra_len + comment_len;
    if (next > eocd) return Malformed(what, absl::StrCat("directory entry ", i, " overruns"));
    std::string name(zip.substr(at + kDirectoryEntrySize, name_len));
    if (size == 0xFFFFFFFF || packed == 0xFFFFFFFF || local == 0xFFFFFFFF) {
      return Malformed(what, absl::StrCat("entry ", name, " is zip64 (past 4 GiB): not read"));
    }
    if (method != 0 || packed != size) {
      return Malformed(what, absl::StrCat("entry ", name, " is compressed (method ", method,
                                          "); torch.save stores entries"));
    }
    if (local > zip.size() || zip.size() - local < kLocalHeaderSize ||
        Le(zip, local, 4) != kLocalHeader) {
      return Malformed(what, absl::StrCat("entry ", name, ": bad local header"));
    }
    const uint64_t data_at =
        local + kLocalHeaderSize + Le(zip, local + 26, 2) + Le(zip, local + 28, 2);
    if (data_at > zip.size() || size > zip.size() - data_at) {
      return Malformed(what, absl::StrCat("entry ", name, " overruns the archive"));
    }
    out.emplace_back(std::move(name), zip.substr(data_at, size));
    at = next;
  }
  return out;
}

absl::StatusOr<TorchSavedTensor> ReadTorchSavedTensor(absl::string_view archive,
                                                      absl::string_view what) {
  absl::StatusOr<std::vector<std::pair<std::string, absl::string_view>>> entries =
      ReadStoredZip(archive, what);
  if (!entries.ok()) return entries.status();
  // The prefix is the directory of data.pkl (torch names it after the file, or "archive").
  std::string prefix;
  absl::string_view pkl;
  bool found = false;
  for (const auto& [name, bytes] : *entries) {
    if (absl::EndsWith(name, "/data.pkl") && name.find('/') == name.size() - 9) {
      if (found) return Malformed(what, "two data.pkl entries");
      prefix = name.substr(0, name.size() - 8);
      pkl = bytes;
      found = true;
    }
  }
  if (!found) return Malformed(what, "no <name>/data.pkl entry");
  for (const auto& [name, bytes] : *entries) {
    if (name == prefix + "byteorder" && bytes != "little") {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": byte order \"", bytes, "\"; only little-endian is read"));
    }
  }
  const std::string pkl_what = absl::StrCat(what, " ", prefix, "data.pkl");
  absl::StatusOr<Pickle> p = Pickle::Parse(pkl, pkl_what);
  if (!p.ok()) return p.status();
  const int root = p->root();
  if (p->node(root).kind != PickleKind::kObject ||
      p->ClassName(root) != "torch._utils._rebuild_tensor_v2") {
    return absl::InvalidArgumentError(
        absl::StrCat(pkl_what, ": holds \"", p->ClassName(root),
                     "\", not one tensor (torch._utils._rebuild_tensor_v2)"));
  }
  const PickleNode& args = p->node(p->node(root).items[1]);
  TorchSavedTensor t;
  std::string key;
  int64_t numel = 0;
  if (args.items.size() < 4) return absl::InvalidArgumentError(pkl_what + ": too few arguments");
  if (absl::Status s = StorageOf(*p, args.items[0], pkl_what, &t.dtype, &key, &numel); !s.ok()) {
    return s;
  }
  if (!p->Int(args.items[1], &t.storage_offset) || !p->IntTuple(args.items[2], &t.shape) ||
      !p->IntTuple(args.items[3], &t.strides) || t.shape.size() != t.strides.size() ||
      t.storage_offset < 0 || numel < 0) {
    return absl::InvalidArgumentError(pkl_what + ": bad offset, size or stride");
  }
  const std::string data_name = prefix + "data/" + key;
  bool have_data = false;
  for (const auto& [name, bytes] : *entries) {
    if (name == data_name) {
      t.storage = bytes;
      have_data = true;
    }
  }
  if (!have_data) return Malformed(what, absl::StrCat("no entry ", data_name));
  const int64_t elem = TorchDtypeSize(t.dtype);
  if (static_cast<uint64_t>(numel) > t.storage.size() / elem) {
    return Malformed(what, absl::StrCat(data_name, " holds ", t.storage.size(), " bytes, not ",
                                        numel, " elements"));
  }
  // The view's last element: offset + sum((size - 1) * stride) must lie inside the storage.
  int64_t last = t.storage_offset;
  bool empty = false;
  for (size_t d = 0; d < t.shape.size(); ++d) {
    if (t.shape[d] < 0 || t.strides[d] < 0 || t.shape[d] > (int64_t{1} << 40) ||
        t.strides[d] > (int64_t{1} << 40)) {
      return absl::InvalidArgumentError(pkl_what + ": a negative or huge size or stride");
    }
    if (t.shape[d] == 0) empty = true;
    if (t.shape[d] > 0) last += (t.shape[d] - 1) * t.strides[d];
  }
  if (!empty && last >= numel) {
    return absl::InvalidArgumentError(
        absl::StrCat(pkl_what, ": the view reaches element ", last, " of a storage of ", numel));
  }
  return t;
}

float TorchElementAsFloat(const TorchSavedTensor& t, int64_t storage_index) {
  const char* p = t.storage.data() + storage_index * TorchDtypeSize(t.dtype);
  switch (t.dtype) {
    case TorchDtype::kFloat32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case TorchDtype::kFloat64: {
      double f;
      std::memcpy(&f, p, 8);
      return static_cast<float>(f);
    }
    case TorchDtype::kFloat16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return HalfToFloat(h);
    }
    case TorchDtype::kBFloat16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return BFloat16ToFloat(h);
    }
  }
  return 0;
}

}  // namespace shardline::checkpoint
