// Writing one checkpoint: each shard writer writes its data file and an index of its ranges,
// then one rank merges the indexes into MANIFEST.json, the commit point (format.h).
//
//   writer of shard i:  WriteShard(step_dir, i, save_id, slices)
//       shard_<i>.bin         (temp, fsync, rename) the slices' float32 bytes back to back
//       shard_<i>.index.json  (atomic) its ranges with CRC32C each, tagged with save_id
//   committing rank:    CommitCheckpoint(step_dir, S, save_id, meta, timeout)
//       waits until all S index files of this save_id exist (a shared file system is the
//       meeting point, so an asynchronous save needs no collective on a background thread),
//       merges them, checks every tensor is covered exactly once, writes MANIFEST.json
//       atomically, removes the index files.
// A save killed anywhere before the manifest's rename leaves a directory that is no checkpoint.
//
// Torch-free (plain pointers to float32 data), so it compiles without LibTorch.
// Thread safety: functions are reentrant; one writer per shard file.
#ifndef SHARDLINE_CHECKPOINT_SHARD_WRITER_H_
#define SHARDLINE_CHECKPOINT_SHARD_WRITER_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "checkpoint/format.h"

namespace shardline::checkpoint {

// One piece of one original tensor: elements [start, end) of its flattened (row-major) values.
struct SliceData {
  std::string name;            // Parameter, or "<param>#<state>" for optimizer state.
  std::vector<int64_t> shape;  // Global shape.
  int64_t start = 0, end = 0;
  const float* data = nullptr;  // end - start values, borrowed for the call.
};

struct ShardWriteResult {
  std::string data_file;  // Names within the step directory.
  std::string index_file;
  int64_t bytes = 0;
};

// Creates step_dir if needed. Empty slices (start == end) are skipped.
// Errors: INTERNAL naming the path for I/O failures.
absl::StatusOr<ShardWriteResult> WriteShard(const std::string& step_dir, int shard_index,
                                            const std::string& save_id,
                                            const std::vector<SliceData>& slices);

// `meta`'s tensors are ignored (the indexes give them). `cancel` (optional) is polled while
// waiting. Errors: DEADLINE_EXCEEDED naming the missing index files after `timeout`; CANCELLED
// when *cancel turns true first; INTERNAL when the merged ranges do not tile a tensor (names it)
// or for I/O failures.
absl::Status CommitCheckpoint(const std::string& step_dir, int shard_count,
                              const std::string& save_id, const CheckpointMeta& meta,
                              absl::Duration timeout, const std::atomic<bool>* cancel = nullptr);

}  // namespace shardline::checkpoint

#endif  // SHARDLINE_CHECKPOINT_SHARD_WRITER_H_
