// FetchManifest: the coordinator's read of a checkpoint's MANIFEST.json for GetCheckpoint.
//
// The step directory's path comes from a trainer's report, and the coordinator sees it only when
// the checkpoint volume is shared with it. So the read is best-effort for an absent or unreadable
// file (the response then carries the registry's info alone), but refuses what could hurt the
// coordinator: a file that is not regular (a FIFO would block a gRPC thread), one too large, or
// a read that hangs (bounded_file_read.h does the read on a helper thread).
//
// ManifestCache remembers the manifests of committed steps by (job, step), so repeated
// GetCheckpoint calls (a dashboard polling, an export loop) do not re-read the file each time.
//
// Thread safety: FetchManifest is a pure function; ManifestCache has its own lock and fetches
// outside it. Either may be called from any thread (never under the core's lock).
#ifndef SHARDLINE_COORDINATOR_CHECKPOINTS_MANIFEST_FETCH_H_
#define SHARDLINE_COORDINATOR_CHECKPOINTS_MANIFEST_FETCH_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/checkpoint.pb.h"
#include "proto/coordinator.pb.h"

namespace shardline::coordinator {

// The manifest in `step_dir`, or nullopt when it is missing, unreadable, not valid JSON or of
// another format version. Errors: FAILED_PRECONDITION when it is not a regular file,
// OUT_OF_RANGE when it is larger than any manifest can be, DEADLINE_EXCEEDED after `timeout`.
absl::StatusOr<std::optional<CheckpointManifest>> FetchManifest(const std::string& step_dir,
                                                                absl::Duration timeout);

class ManifestCache {
 public:
  using Fetch = std::function<absl::StatusOr<std::optional<CheckpointManifest>>(
      const std::string& step_dir, absl::Duration timeout)>;
  static constexpr size_t kDefaultCapacity = 256;

  // Holds at most `capacity` manifests (the oldest cached goes first); `fetch` reads one
  // (FetchManifest; tests count calls).
  explicit ManifestCache(size_t capacity = kDefaultCapacity, Fetch fetch = FetchManifest)
      : capacity_(capacity), fetch_(std::move(fetch)) {}

  // FetchManifest(info.path()), or the manifest cached for (info.job_id(), info.step()) when it
  // was read for the same path and created_unix_ms (a step written again is read again). Only a
  // committed step's present manifest is cached: an absent one may appear (a volume mounted
  // later) and an uncommitted one may still change. Errors: FetchManifest's (not cached).
  absl::StatusOr<std::optional<CheckpointManifest>> Get(const CheckpointInfo& info,
                                                        absl::Duration timeout);
  size_t size() const;

 private:
  using Key = std::pair<std::string, int64_t>;  // (job, step)
  struct Entry {
    std::string path;
    int64_t created_unix_ms = 0;
    CheckpointManifest manifest;
    uint64_t order = 0;  // insertion order, for eviction
  };

  const size_t capacity_;
  const Fetch fetch_;
  mutable absl::Mutex mu_;
  std::map<Key, Entry> entries_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, Key> by_order_ ABSL_GUARDED_BY(mu_);
  uint64_t next_order_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace shardline::coordinator

#endif  // SHARDLINE_COORDINATOR_CHECKPOINTS_MANIFEST_FETCH_H_
