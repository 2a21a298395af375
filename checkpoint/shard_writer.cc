#include "checkpoint/shard_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "checkpoint/crc32c.h"
#include "checkpoint/durable_file.h"
#include "checkpoint/manifest_io.h"
#include "common/write_beneath.h"

namespace shardline::checkpoint {
namespace {

absl::Status Errno(absl::string_view what, const std::string& path) {
  return absl::InternalError(absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

absl::Status WriteAll(int fd, const void* data, size_t n, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return Errno("write", path);
    p += w;
    n -= static_cast<size_t>(w);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ShardWriteResult> WriteShard(const std::string& step_dir, int shard_index,
                                            const std::string& save_id,
                                            const std::vector<SliceData>& slices) {
  // Creates step_N/ (and the root) durably: the root is fsynced after step_N/ appears.
  absl::Status s = MakeDirsDurable(step_dir);
  if (!s.ok()) return s;
  ShardWriteResult result;
  result.data_file = DataFileName(shard_index);
  result.index_file = ShardIndexFileName(shard_index);
  const std::string path = absl::StrCat(step_dir, "/", result.data_file);
  const std::string tmp = absl::StrCat(path, ".tmp.", save_id);
  absl::StatusOr<int> opened = OpenForWrite(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (!opened.ok()) return opened.status();
  const int fd = *opened;

  CheckpointManifest index;
  index.set_format_version(kFormatVersion);
  index.set_save_id(save_id);
  int64_t offset = 0;
  for (const SliceData& sl : slices) {
    const int64_t n = sl.end - sl.start;
    if (n <= 0) continue;
    const size_t bytes = static_cast<size_t>(n) * sizeof(float);
    // In chunks that fit in the cache, each checksummed right before it is written: the write
    // then copies from the cache, and the slice crosses memory once instead of twice.
    constexpr size_t kChunk = size_t{4} << 20;
    const char* p = reinterpret_cast<const char*>(sl.data);
    uint32_t crc = 0;
    for (size_t done = 0; done < bytes && s.ok(); done += kChunk) {
      const size_t c = std::min(kChunk, bytes - done);
      crc = Crc32cExtend(crc, p + done, c);
      s = WriteAll(fd, p + done, c, tmp);
    }
    if (!s.ok()) {
      ::close(fd);
      (void)UnlinkBeneath(tmp);
      return s;
    }
    TensorEntry* t = index.add_tensors();
    t->set_name(sl.name);
    for (int64_t d : sl.shape) t->add_shape(d);
    t->set_dtype("float32");
    TensorRange* r = t->add_ranges();
    r->set_file(result.data_file);
    r->set_global_offset(sl.start);
    r->set_numel(n);
    r->set_file_offset(offset);
    r->set_crc32c(crc);
    offset += static_cast<int64_t>(bytes);
  }
  if (::fsync(fd) != 0) {
    s = Errno("fsync", tmp);
    ::close(fd);
    (void)UnlinkBeneath(tmp);
    return s;
  }
  ::close(fd);
  // The data file's name is durable (step directory fsynced) before its index names it.
  s = RenameDurable(tmp, path);
  if (!s.ok()) {
    (void)UnlinkBeneath(tmp);
    return s;
  }
  DataFile* f = index.add_files();
  f->set_name(result.data_file);
  f->set_size_bytes(offset);
  f->set_shard_index(shard_index);
  result.bytes = offset;
  s = WriteManifestFile(absl::StrCat(step_dir, "/", result.index_file), index);
  if (!s.ok()) return s;
  return result;
}

absl::Status CommitCheckpoint(const std::string& step_dir, int shard_count,
                              const std::string& save_id, const CheckpointMeta& meta,
                              absl::Duration timeout, const std::atomic<bool>* cancel) {
  const absl::Time deadline = absl::Now() + timeout;
  std::vector<CheckpointManifest> indexes(shard_count);
  std::vector<bool> have(shard_count, false);
  absl::Duration poll = absl::Milliseconds(2);
  while (true) {
    std::vector<std::string> missing;
    for (int i = 0; i < shard_count; ++i) {
      if (have[i]) continue;
      const std::string path = absl::StrCat(step_dir, "/", ShardIndexFileName(i));
      absl::StatusOr<CheckpointManifest> m = ReadManifestFile(path);
      if (m.ok() && m->save_id() == save_id) {
        indexes[i] = *std::move(m);
        have[i] = true;
      } else {
        missing.push_back(ShardIndexFileName(i));  // Absent, or a leftover of another save.
      }
    }
    if (missing.empty()) break;
    if (cancel != nullptr && cancel->load()) {
      return absl::CancelledError(absl::StrCat("checkpoint ", step_dir,
                                               ": save abandoned while waiting for ",
                                               absl::StrJoin(missing, ", ")));
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("checkpoint ", step_dir, ": shard writers did not finish within ",
                       absl::FormatDuration(timeout), "; missing ", absl::StrJoin(missing, ", ")));
    }
    absl::SleepFor(poll);
    poll = std::min(poll * 2, absl::Milliseconds(100));
  }

  CheckpointManifest manifest;
  CheckpointMeta m = meta;
  m.format_version = kFormatVersion;
  m.created_unix = absl::ToUnixSeconds(absl::Now());
  MetaToManifest(m, &manifest);
  manifest.set_save_id(save_id);
  std::map<std::string, int> by_name;
  for (int i = 0; i < shard_count; ++i) {
    for (const DataFile& f : indexes[i].files()) *manifest.add_files() = f;
    for (const TensorEntry& t : indexes[i].tensors()) {
      auto it = by_name.find(t.name());
      if (it == by_name.end()) {
        it = by_name.emplace(t.name(), manifest.tensors_size()).first;
        TensorEntry* e = manifest.add_tensors();
        e->set_name(t.name());
        *e->mutable_shape() = t.shape();
        e->set_dtype(t.dtype());
      }
      for (const TensorRange& r : t.ranges()) {
        *manifest.mutable_tensors(it->second)->add_ranges() = r;
      }
    }
  }
  for (TensorEntry& t : *manifest.mutable_tensors()) {
    std::sort(t.mutable_ranges()->begin(), t.mutable_ranges()->end(),
              [](const TensorRange& a, const TensorRange& b) {
                return a.global_offset() < b.global_offset();
              });
    int64_t numel = 1;
    for (int64_t d : t.shape()) numel *= d;
    int64_t next = 0;
    for (const TensorRange& r : t.ranges()) {
      if (r.global_offset() != next) break;
      next += r.numel();
    }
    if (next != numel) {
      return absl::InternalError(absl::StrCat("checkpoint ", step_dir, ": tensor ", t.name(),
                                              " is not covered exactly by the shards' ranges"));
    }
  }
  absl::Status s = WriteManifestFile(absl::StrCat(step_dir, "/", kManifestFile), manifest);
  if (!s.ok()) return s;
  for (int i = 0; i < shard_count; ++i) {
    (void)UnlinkBeneath(absl::StrCat(step_dir, "/", ShardIndexFileName(i)));
  }
  // WriteFileAtomic synced the step directory (the manifest's name); the step directory's own
  // entry in the root must be durable too, or a power cut could lose a committed checkpoint
  // whose writer created step_N/ without syncing the root (or on another node).
  return FsyncDir(ParentDir(step_dir));
}

}  // namespace shardline::checkpoint
