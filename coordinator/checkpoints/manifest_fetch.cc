#include "coordinator/checkpoints/manifest_fetch.h"

#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "checkpoint/format.h"
#include "checkpoint/manifest_io.h"
#include "coordinator/checkpoints/bounded_file_read.h"

namespace shardline::coordinator {
namespace {
// A manifest lists every tensor's ranges: megabytes for large models, never near this.
constexpr int64_t kMaxManifestBytes = int64_t{256} << 20;
}  // namespace

absl::StatusOr<std::optional<CheckpointManifest>> FetchManifest(const std::string& step_dir,
                                                                absl::Duration timeout) {
  const std::string path = absl::StrCat(step_dir, "/", checkpoint::kManifestFile);
  absl::StatusOr<std::string> text = ReadRegularFileBounded(path, timeout, kMaxManifestBytes);
  if (absl::IsFailedPrecondition(text.status()) || absl::IsDeadlineExceeded(text.status()) ||
      absl::IsOutOfRange(text.status())) {
    return text.status();
  }
  if (!text.ok()) return std::nullopt;  // not shared with this machine, or unreadable here
  absl::StatusOr<CheckpointManifest> manifest = checkpoint::ManifestFromJson(*text, path);
  if (!manifest.ok() || manifest->format_version() != checkpoint::kFormatVersion) {
    return std::nullopt;
  }
  return std::optional<CheckpointManifest>(*std::move(manifest));
}

absl::StatusOr<std::optional<CheckpointManifest>> ManifestCache::Get(const CheckpointInfo& info,
                                                                     absl::Duration timeout) {
  const Key key(info.job_id(), info.step());
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(key);
    if (it != entries_.end() && it->second.path == info.path() &&
        it->second.created_unix_ms == info.created_unix_ms()) {
      return std::optional<CheckpointManifest>(it->second.manifest);
    }
  }
  // Outside the lock: the read may take up to `timeout`, and other steps must not wait for it.
  absl::StatusOr<std::optional<CheckpointManifest>> got = fetch_(info.path(), timeout);
  if (!got.ok() || !got->has_value() || !info.committed() || capacity_ == 0) return got;
  absl::MutexLock lock(&mu_);
  if (auto old = entries_.find(key); old != entries_.end()) {
    by_order_.erase(old->second.order);
    entries_.erase(old);
  }
  while (entries_.size() >= capacity_ && !by_order_.empty()) {
    entries_.erase(by_order_.begin()->second);
    by_order_.erase(by_order_.begin());
  }
  const uint64_t order = next_order_++;
  entries_[key] = Entry{info.path(), info.created_unix_ms(), **got, order};
  by_order_[order] = key;
  return got;
}

size_t ManifestCache::size() const {
  absl::MutexLock lock(&mu_);
  return entries_.size();
}

}  // namespace shardline::coordinator
