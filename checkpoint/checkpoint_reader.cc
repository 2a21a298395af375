#include "checkpoint/checkpoint_reader.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "checkpoint/crc32c.h"
#include "checkpoint/manifest_io.h"
#include "checkpoint/mapped_read_guard.h"
#include "common/open_beneath.h"

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

CheckpointReader::~CheckpointReader() {
  absl::MutexLock lock(&mu_);
  for (auto& [file, m] : maps_) ::munmap(const_cast<char*>(m.first), m.second);
}

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
  std::set<std::string> names;
  for (const TensorEntry& t : m->tensors()) {
    // Readers look tensors up by name: an empty or repeated name would make ReadElements read
    // another entry's ranges than the one checked here (found by //fuzz:checkpoint_reader_fuzzer).
    if (t.name().empty() || !names.insert(t.name()).second) {
      return absl::DataLossError(absl::StrCat(path, ": tensor name '", t.name(), "' is ",
                                              t.name().empty() ? "empty" : "listed twice"));
    }
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
        return absl::DataLossError(
            absl::StrCat(path, ": tensor ", t.name(), " has an invalid shape (dimension ", d, ")"));
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
      return absl::DataLossError(absl::StrCat(path, ": tensor ", t.name(), " ranges cover ", next,
                                              " of ", numel, " elements"));
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
      return absl::DataLossError(
          absl::StrCat("checkpoint data file ", path, " is ",
                       st.st_size < f.size_bytes() ? "truncated" : "too long", ": ", st.st_size,
                       " bytes, manifest says ", f.size_bytes(), " (holds tensor ",
                       FirstTensorIn(*manifest_, f.name()), ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckpointReader::ReadRange(int tensor, int range, char* dst) const {
  const TensorEntry& t = manifest_->tensors(tensor);
  const TensorRange& r = t.ranges(range);
  const std::string path = absl::StrCat(dir_, "/", r.file());
  absl::StatusOr<int> opened = OpenForRead(path, "checkpoint data file");
  if (absl::IsNotFound(opened.status())) {
    return absl::NotFoundError(
        absl::StrCat("checkpoint data file ", path, " is missing (tensor ", t.name(), ")"));
  }
  if (!opened.ok()) return opened.status();
  const int fd = *opened;
  const size_t n = static_cast<size_t>(r.numel()) * sizeof(float);
  // In chunks that fit in the cache, each checksummed right after it is read: one pass over
  // memory instead of two.
  constexpr size_t kChunk = size_t{4} << 20;
  size_t done = 0;
  uint32_t crc = 0;
  while (done < n) {
    const size_t want = std::min(kChunk, n - done);
    size_t got_chunk = 0;
    while (got_chunk < want) {
      const ssize_t got =
          ::pread(fd, dst + done + got_chunk, want - got_chunk, r.file_offset() + done + got_chunk);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) break;
      got_chunk += static_cast<size_t>(got);
    }
    crc = Crc32cExtend(crc, dst + done, got_chunk);
    done += got_chunk;
    if (got_chunk < want) break;
  }
  ::close(fd);
  if (done != n) {
    return absl::DataLossError(absl::StrCat("checkpoint data file ", path, " is truncated: tensor ",
                                            t.name(), " range at byte ", r.file_offset(),
                                            " ends past the end of the file"));
  }
  if (crc != r.crc32c()) {
    return absl::DataLossError(absl::StrCat("checksum mismatch in checkpoint data file ", path,
                                            ": tensor ", t.name(), " elements [", r.global_offset(),
                                            ", ", r.global_offset() + r.numel(), ")"));
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
    return absl::NotFoundError(absl::StrCat("checkpoint ", dir_, " has no tensor ", name));
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

absl::StatusOr<const char*> CheckpointReader::MapFile(const std::string& file,
                                                      const std::string& tensor) const {
  // Mapped under the lock: the other loading threads need the same file and would otherwise
  // map (and read) it again.
  absl::MutexLock lock(&mu_);
  auto it = maps_.find(file);
  if (it != maps_.end()) return it->second.first;
  int64_t expected = -1;
  for (const DataFile& f : manifest_->files()) {
    if (f.name() == file) expected = f.size_bytes();
  }
  const std::string path = absl::StrCat(dir_, "/", file);
  absl::StatusOr<int> opened = OpenForRead(path, "checkpoint data file");
  if (absl::IsNotFound(opened.status())) {
    return absl::NotFoundError(
        absl::StrCat("checkpoint data file ", path, " is missing (tensor ", tensor, ")"));
  }
  if (!opened.ok()) return opened.status();
  const int fd = *opened;
  struct stat st;
  if (::fstat(fd, &st) != 0 || st.st_size != expected) {
    const int64_t size = st.st_size;
    ::close(fd);
    return absl::DataLossError(absl::StrCat(
        "checkpoint data file ", path, " is ", size < expected ? "truncated" : "too long", ": ",
        size, " bytes, manifest says ", expected, " (tensor ", tensor, ")"));
  }
  const char* addr = nullptr;
  if (st.st_size > 0) {
    // Page tables are filled per range by MapElements (in parallel on the loading threads);
    // without that a page fault per page cost more than the read itself here.
    void* m = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
      ::close(fd);
      return absl::InternalError(absl::StrCat("mmap ", path, ": ", std::strerror(errno)));
    }
    addr = static_cast<const char*>(m);
  }
  ::close(fd);  // The mapping keeps the file.
  maps_.emplace(file, std::make_pair(addr, static_cast<size_t>(st.st_size)));
  return addr;
}

absl::StatusOr<std::vector<CheckpointReader::MappedPiece>> CheckpointReader::MapElements(
    const std::string& name, int64_t start, int64_t end) const {
  const int ti = FindTensor(name);
  if (ti < 0) {
    return absl::NotFoundError(absl::StrCat("checkpoint ", dir_, " has no tensor ", name));
  }
  const TensorEntry& t = manifest_->tensors(ti);
  std::vector<MappedPiece> pieces;
  for (int j = 0; j < t.ranges_size(); ++j) {
    const TensorRange& r = t.ranges(j);
    const int64_t lo = std::max(start, r.global_offset());
    const int64_t hi = std::min(end, r.global_offset() + r.numel());
    if (lo >= hi) continue;
    absl::StatusOr<const char*> base = MapFile(r.file(), t.name());
    if (!base.ok()) return base.status();
    const float* range = reinterpret_cast<const float*>(*base + r.file_offset());
    bool checked;
    {
      absl::MutexLock lock(&mu_);
      checked = checked_.count({ti, j}) > 0;
    }
    if (!checked) {
      // Read the range and fill its page tables in one call (page-aligned start) rather than a
      // fault per page; kernels before 5.14 refuse the advice and the pages fault in instead.
      const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
      const uintptr_t first = reinterpret_cast<uintptr_t>(range) & ~(page - 1);
      const uintptr_t last = reinterpret_cast<uintptr_t>(range + r.numel());
#ifdef MADV_POPULATE_READ
      (void)::madvise(reinterpret_cast<void*>(first), last - first, MADV_POPULATE_READ);
#endif
      // The whole range is checked even when only part of it is wanted (resharding): the
      // checksum covers the range. Guarded: the file may have shrunk since it was mapped.
      const size_t bytes = static_cast<size_t>(r.numel()) * sizeof(float);
      uint32_t crc = 0;
      if (!GuardMappedRead(range, bytes, [&] { crc = Crc32c(range, bytes); })) {
        return TruncatedWhileMapped(ti, j);
      }
      if (crc != r.crc32c()) {
        return absl::DataLossError(absl::StrCat(
            "checksum mismatch in checkpoint data file ", dir_, "/", r.file(), ": tensor ",
            t.name(), " elements [", r.global_offset(), ", ", r.global_offset() + r.numel(), ")"));
      }
      absl::MutexLock lock(&mu_);
      checked_[{ti, j}] = true;
    }
    pieces.push_back(MappedPiece{lo - start, hi - lo, range + (lo - r.global_offset()), ti, j});
  }
  return pieces;
}

absl::Status CheckpointReader::TruncatedWhileMapped(int tensor, int range) const {
  const TensorEntry& t = manifest_->tensors(tensor);
  const TensorRange& r = t.ranges(range);
  return absl::DataLossError(absl::StrCat(
      "checkpoint data file ", dir_, "/", r.file(), " was truncated after it was mapped: tensor ",
      t.name(), " elements [", r.global_offset(), ", ", r.global_offset() + r.numel(), ") at byte ",
      r.file_offset(), " are no longer in the file"));
}

absl::Status CheckpointReader::CopyMapped(const MappedPiece& piece, float* dst) const {
  if (piece.count <= 0) return absl::OkStatus();
  const size_t bytes = static_cast<size_t>(piece.count) * sizeof(float);
  if (!GuardMappedRead(piece.src, bytes, [&] { std::memcpy(dst, piece.src, bytes); })) {
    return TruncatedWhileMapped(piece.tensor, piece.range);
  }
  return absl::OkStatus();
}

}  // namespace shardline::checkpoint
