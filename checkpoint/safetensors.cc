#include "checkpoint/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/durable_file.h"
#include "checkpoint/format.h"
#include "common/write_beneath.h"

namespace shardline::checkpoint {
namespace {

std::string JsonQuote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += absl::StrFormat("\\u%04x", c);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

struct HeaderEntry {
  std::string name, dtype;
  std::vector<int64_t> shape;
  int64_t bytes = 0;
};

std::string BuildHeader(const std::vector<HeaderEntry>& entries,
                        const std::map<std::string, std::string>& metadata) {
  std::vector<std::string> items;
  std::vector<std::string> meta;
  for (const auto& [k, v] : metadata) meta.push_back(absl::StrCat(JsonQuote(k), ":", JsonQuote(v)));
  items.push_back(absl::StrCat("\"__metadata__\":{", absl::StrJoin(meta, ","), "}"));
  int64_t offset = 0;
  for (const HeaderEntry& e : entries) {
    items.push_back(absl::StrCat(JsonQuote(e.name), ":{\"dtype\":", JsonQuote(e.dtype),
                                 ",\"shape\":[", absl::StrJoin(e.shape, ","),
                                 "],\"data_offsets\":[", offset, ",", offset + e.bytes, "]}"));
    offset += e.bytes;
  }
  std::string header = absl::StrCat("{", absl::StrJoin(items, ","), "}");
  while (header.size() % 8 != 0) header += ' ';
  return header;
}

// Streams a header and then tensor bytes into path (temp + rename).
class AtomicWriter {
 public:
  explicit AtomicWriter(std::string path) : path_(std::move(path)) {
    std::random_device rd;
    tmp_ = absl::StrFormat("%s.tmp.%08x", path_, rd());
  }
  ~AtomicWriter() {
    if (fd_ >= 0) {
      ::close(fd_);
      (void)UnlinkBeneath(tmp_);
    }
  }
  absl::Status Open() {
    absl::StatusOr<int> fd = OpenForWrite(tmp_, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (!fd.ok()) return fd.status();
    fd_ = *fd;
    return absl::OkStatus();
  }
  absl::Status Write(const void* data, size_t n) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      const ssize_t w = ::write(fd_, p, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return Errno("write");
      p += w;
      n -= static_cast<size_t>(w);
    }
    return absl::OkStatus();
  }
  absl::Status Commit() {
    if (::fsync(fd_) != 0) return Errno("fsync");
    ::close(fd_);
    fd_ = -1;
    // The rename and a sync of the target's directory: the exported name survives a crash.
    absl::Status s = RenameDurable(tmp_, path_);
    if (!s.ok()) (void)UnlinkBeneath(tmp_);
    return s;
  }

 private:
  absl::Status Errno(absl::string_view what) {
    return absl::InternalError(absl::StrCat(what, " ", tmp_, ": ", std::strerror(errno)));
  }
  std::string path_, tmp_;
  int fd_ = -1;
};

absl::Status WriteHeader(AtomicWriter& w, const std::string& header) {
  const uint64_t n = header.size();
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
  absl::Status s = w.Write(len, 8);
  if (!s.ok()) return s;
  return w.Write(header.data(), header.size());
}

}  // namespace

absl::Status WriteSafetensors(const std::string& path,
                              const std::vector<SafetensorsTensor>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  std::vector<HeaderEntry> entries;
  for (const SafetensorsTensor& t : tensors) {
    entries.push_back({t.name, t.dtype, t.shape, static_cast<int64_t>(t.data.size())});
  }
  AtomicWriter w(path);
  absl::Status s = w.Open();
  if (!s.ok()) return s;
  s = WriteHeader(w, BuildHeader(entries, metadata));
  if (!s.ok()) return s;
  for (const SafetensorsTensor& t : tensors) {
    s = w.Write(t.data.data(), t.data.size());
    if (!s.ok()) return s;
  }
  return w.Commit();
}

absl::Status WriteSafetensorsFromCheckpoint(const CheckpointReader& reader,
                                            const std::vector<CheckpointExportEntry>& entries,
                                            const std::map<std::string, std::string>& metadata,
                                            const std::string& out_path) {
  std::vector<HeaderEntry> header;
  for (const CheckpointExportEntry& e : entries) {
    int64_t n = 1;
    for (int64_t d : e.shape) n *= d;
    header.push_back({e.name, "F32", e.shape, n * 4});
  }
  AtomicWriter w(out_path);
  absl::Status s = w.Open();
  if (!s.ok()) return s;
  s = WriteHeader(w, BuildHeader(header, metadata));
  if (!s.ok()) return s;
  std::vector<float> buf;
  for (const CheckpointExportEntry& e : entries) {
    int64_t n = 1;
    for (int64_t d : e.shape) n *= d;
    buf.resize(static_cast<size_t>(n));
    if (e.stored.empty()) {
      std::fill(buf.begin(), buf.end(), e.value);
    } else {
      s = reader.ReadElements(e.stored, 0, n, buf.data());
      if (!s.ok()) return s;
    }
    s = w.Write(buf.data(), buf.size() * sizeof(float));
    if (!s.ok()) return s;
  }
  return w.Commit();
}

namespace {

absl::Status Export(absl::StatusOr<std::unique_ptr<CheckpointReader>> reader,
                    const std::string& out_path) {
  if (!reader.ok()) return reader.status();
  const CheckpointMeta& meta = (*reader)->meta();
  absl::Status s = (*reader)->VerifyFiles();
  if (!s.ok()) return s;
  // (output name, stored tensor) in name order: parameters, plus aliases of tied ones.
  std::map<std::string, const TensorInfo*> out;
  for (const TensorInfo& t : meta.tensors) {
    if (t.name.find('#') == std::string::npos) out[t.name] = &t;
  }
  for (const auto& [alias, canonical] : meta.aliases) {
    auto it = out.find(canonical);
    if (it != out.end()) out[alias] = it->second;
  }
  std::vector<CheckpointExportEntry> entries;
  for (const auto& [name, t] : out) entries.push_back({name, t->name, t->shape});
  return WriteSafetensorsFromCheckpoint(**reader, entries,
                                        {{"format", "pt"},
                                         {"step", absl::StrCat(meta.step)},
                                         {"model_fingerprint", meta.model_fingerprint}},
                                        out_path);
}

}  // namespace

absl::Status ExportSafetensors(const std::string& checkpoint_root, int64_t step,
                               const std::string& out_path) {
  return Export(CheckpointReader::Open(checkpoint_root, step), out_path);
}

absl::Status ExportSafetensorsFromStepDir(const std::string& step_dir,
                                          const std::string& out_path) {
  return Export(CheckpointReader::OpenDir(step_dir), out_path);
}

absl::StatusOr<std::vector<SafetensorsTensor>> ReadSafetensors(const std::string& path) {
  absl::StatusOr<std::unique_ptr<SafetensorsReader>> reader = SafetensorsReader::Open(path);
  if (!reader.ok()) return reader.status();
  std::vector<SafetensorsTensor> out;
  for (const SafetensorsEntry& e : (*reader)->tensors()) {
    SafetensorsTensor t;
    t.name = e.name;
    t.dtype = e.dtype;
    t.shape = e.shape;
    t.data.resize(static_cast<size_t>(e.bytes()));
    absl::Status s = (*reader)->Read(e, t.data.data());
    if (!s.ok()) return s;
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace shardline::checkpoint
