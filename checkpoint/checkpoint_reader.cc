#include "checkpoint/checkpoint_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <map>

#include "absl/strings/str_cat.h"
#include "checkpoint/crc32c.h"
#include "checkpoint/manifest_io.h"

namespace shardline::checkpoint {
namespace {

std::string FirstTensorIn(const CheckpointManifest& m, const std::string& file) {
  for (const TensorEntry& t : m.tensors()) {
    for (const TensorRange& r : t.ranges()) {
      if (r.file() == file) return t.name();
    }
  }
  return "(none)";
}

}  // namespace

CheckpointReader::~CheckpointReader() = default;

absl::StatusOr<std::unique_ptr<CheckpointReader>> CheckpointReader::Open(const std::string& root,
                                                                         int64_t step) {
  absl::StatusOr<int64_t> resolved = ResolveStep(root, step);
  if (!resolved.ok()) return resolved.status();
  return OpenDir(StepDir(root, *resolved));
}

absl::StatusOr<std::unique_ptr<CheckpointReader>> CheckpointReader::OpenDir(
    const std::string& step_dir) {
  const std::string path = absl::StrCat(step_dir, "/", kManifestFile);
  absl::StatusOr<CheckpointManifest> m = ReadManifestFile(path);
  if (!m.ok()) return m.status();
  std::map<std::string, int64_t> file_sizes;
  for (const DataFile& f : m->files()) {
    // Data files are plain names inside the step directory: a manifest must not make the
    // reader open anything else ("../x", "/etc/x"). Found by //fuzz:checkpoint_reader_fuzzer.
    if (f.name().empty() || f.name() == "." || f.name() == ".." ||
        f.name().find('/') != std::string::npos) {
      return absl::DataLossError(
          absl::StrCat(path, ": data file name '", f.name(), "' is not a plain file name"));
    }
    file_sizes[f.name()] = f.size_bytes();
  }
  for (const TensorEntry& t : m->tensors()) {
    if (t.dtype() != "float32") {
      return absl::DataLossError(absl::StrCat(path, ": tensor ", t.name(), " has dtype '",
                                              t.dtype(), "' (only float32 is written)"));
    }
    // Sizes come from the file: every product and sum below is checked before it could
    // overflow (signed overflow is undefined; found by //fuzz:checkpoint_reader_fuzzer).
    constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
    int64_t numel = 1;
    for (int64_t d : t.shape()) {
      if (d < 0 || (d > 0 && numel > kMax / static_cast<int64_t>(sizeof(float)) / d)) {
        return absl::DataLossError(absl::StrCat(path, ": tensor ", t.name(),
                                                " has an invalid shape (dimension ", d, ")"));
      }
      numel *= d;
    }
    int64_t next = 0;
    for (const TensorRange& r : t.ranges()) {
      auto f = file_sizes.find(r.file());
      if (r.global_offset() != next || r.numel() <= 0 || r.numel() > numel - next ||
          f == file_sizes.end() || r.file_offset() < 0 || r.file_offset() > f->second ||
          r.numel() > (f->second - r.file_offset()) / static_cast<int64_t>(sizeof(float))) {
        return absl::DataLossError(absl::StrCat(path, ": tensor ", t.name(),
                                                " has an inconsistent range in file ", r.file()));
      }
      next += r.numel();
    }
    if (next != numel) {
      return absl::DataLossError(
          absl::StrCat(path, ": tensor ", t.name(), " ranges cover ", next, " of ", numel,
                       " elements"));
    }
  }
  std::unique_ptr<CheckpointReader> reader(new CheckpointReader());
  reader->dir_ = step_dir;
  reader->meta_ = MetaFromManifest(*m);
  reader->manifest_ = std::make_unique<CheckpointManifest>(*std::move(m));
  return reader;
}

int CheckpointReader::FindTensor(const std::string& name) const {
  for (int i = 0; i < manifest_->tensors_size(); ++i) {
    if (manifest_->tensors(i).name() == name) return i;
  }
  return -1;
}

absl::Status CheckpointReader::VerifyFiles() const {
  for (const DataFile& f : manifest_->files()) {
    const std::string path = absl::StrCat(dir_, "/", f.name());
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) {
      return absl::NotFoundError(absl::StrCat("checkpoint data file ", path,
                                              " is missing (holds tensor ",
                                              FirstTensorIn(*manifest_, f.name()), ")"));
    }
    if (st.st_size != f.size_bytes()) {
      return absl::DataLossError(absl::StrCat(
          "checkpoint data file ", path, " is ", st.st_size < f.size_bytes() ? "truncated" : "too long",
          ": ", st.st_size, " bytes, manifest says ", f.size_bytes(), " (holds tensor ",
          FirstTensorIn(*manifest_, f.name()), ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckpointReader::ReadRange(int tensor, int range, char* dst) const {
  const TensorEntry& t = manifest_->tensors(tensor);
  const TensorRange& r = t.ranges(range);
  const std::string path = absl::StrCat(dir_, "/", r.file());
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) {
    if (errno == ENOENT) {
      return absl::NotFoundError(
          absl::StrCat("checkpoint data file ", path, " is missing (tensor ", t.name(), ")"));
    }
    return absl::InternalError(absl::StrCat("open ", path, ": ", std::strerror(errno)));
  }
  const size_t n = static_cast<size_t>(r.numel()) * sizeof(float);
  size_t done = 0;
  while (done < n) {
    const ssize_t got = ::pread(fd, dst + done, n - done, r.file_offset() + done);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    done += static_cast<size_t>(got);
  }
  ::close(fd);
  if (done != n) {
    return absl::DataLossError(absl::StrCat("checkpoint data file ", path,
                                            " is truncated: tensor ", t.name(), " range at byte ",
                                            r.file_offset(), " ends past the end of the file"));
  }
  const uint32_t crc = Crc32c(dst, n);
  if (crc != r.crc32c()) {
    return absl::DataLossError(absl::StrCat("checksum mismatch in checkpoint data file ", path,
                                            ": tensor ", t.name(), " elements [",
                                            r.global_offset(), ", ",
                                            r.global_offset() + r.numel(), ")"));
  }
  return absl::OkStatus();
}

absl::Status CheckpointReader::VerifyAll() const {
  absl::Status s = VerifyFiles();
  if (!s.ok()) return s;
  std::unique_ptr<char[]> bytes;
  size_t capacity = 0;
  for (int i = 0; i < manifest_->tensors_size(); ++i) {
    for (int j = 0; j < manifest_->tensors(i).ranges_size(); ++j) {
      const size_t n = static_cast<size_t>(manifest_->tensors(i).ranges(j).numel()) * 4;
      if (n > capacity) {
        bytes.reset(new char[n]);
        capacity = n;
      }
      s = ReadRange(i, j, bytes.get());
      if (!s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

absl::Status CheckpointReader::ReadElements(const std::string& name, int64_t start, int64_t end,
                                            float* out) const {
  const int ti = FindTensor(name);
  if (ti < 0) {
    return absl::NotFoundError(
        absl::StrCat("checkpoint ", dir_, " has no tensor ", name));
  }
  const TensorEntry& t = manifest_->tensors(ti);
  std::unique_ptr<char[]> bytes;
  for (int j = 0; j < t.ranges_size(); ++j) {
    const TensorRange& r = t.ranges(j);
    const int64_t lo = std::max(start, r.global_offset());
    const int64_t hi = std::min(end, r.global_offset() + r.numel());
    if (lo >= hi) continue;
    if (lo == r.global_offset() && hi == r.global_offset() + r.numel()) {
      // The whole range is wanted (same layout, or a coarser one): read it in place.
      absl::Status s = ReadRange(ti, j, reinterpret_cast<char*>(out + (lo - start)));
      if (!s.ok()) return s;
      continue;
    }
    bytes.reset(new char[static_cast<size_t>(r.numel()) * sizeof(float)]);
    absl::Status s = ReadRange(ti, j, bytes.get());
    if (!s.ok()) return s;
    std::memcpy(out + (lo - start), bytes.get() + (lo - r.global_offset()) * sizeof(float),
                static_cast<size_t>(hi - lo) * sizeof(float));
  }
  return absl::OkStatus();
}

}  // namespace shardline::checkpoint
