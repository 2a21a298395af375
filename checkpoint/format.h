// The on-disk layout of a checkpoint (docs/checkpoint_format.md), without the manifest's proto
// (so LibTorch translation units can include it: LibTorch ships older protobuf headers).
//
//   <root>/step_<N>/shard_<IIIII>.bin        one data file per shard writer (shard index I)
//   <root>/step_<N>/shard_<IIIII>.index.json a writer's ranges and checksums (merged at commit)
//   <root>/step_<N>/MANIFEST.json            written last, atomically: the commit point
//
// A step directory without MANIFEST.json is not a checkpoint: it is listed nowhere and loading
// never picks it. Retention deletes only older committed checkpoints and never the newest one (of
// those at or below the step it is given).
//
// Thread safety: pure functions on the file system; concurrent writers of one path race.
#ifndef SHARDLINE_CHECKPOINT_FORMAT_H_
#define SHARDLINE_CHECKPOINT_FORMAT_H_

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
// WriteFileAtomic, FsyncDir and MakeDirsDurable, which used to be declared here.
#include "checkpoint/durable_file.h"

namespace shardline::checkpoint {

// The manifest format this code writes and the only one it reads.
inline constexpr int kFormatVersion = 1;
inline constexpr char kManifestFile[] = "MANIFEST.json";

std::string StepDirName(int64_t step);                       // "step_<N>"
std::string StepDir(const std::string& root, int64_t step);  // root + "/step_<N>"
std::string DataFileName(int shard_index);                   // "shard_00003.bin"
std::string ShardIndexFileName(int shard_index);             // "shard_00003.index.json"
// "step_<N>" -> N; false for anything else.
bool ParseStepDirName(absl::string_view name, int64_t* step);

// Steps of the committed checkpoints under `root`, ascending. A missing root is empty.
absl::StatusOr<std::vector<int64_t>> ListCommittedSteps(const std::string& root);
// step == -1: the newest committed step (NOT_FOUND when none); step >= 0: that step if committed
// (NOT_FOUND naming the directory otherwise).
absl::StatusOr<int64_t> ResolveStep(const std::string& root, int64_t step);
// Keeps the newest `keep_last` committed checkpoints at or below step `up_to` (0 keeps all; the
// newest of them is always kept) and deletes older committed ones plus uncommitted step
// directories older than that newest one (leftovers of interrupted saves). Steps above `up_to`
// are never touched: the committing rank passes the step the coordinator acknowledged last, so
// newer checkpoints it has not acknowledged yet, and saves still being written, stay.
// Returns the deleted steps.
absl::StatusOr<std::vector<int64_t>> ApplyRetention(
    const std::string& root, int keep_last, int64_t up_to = std::numeric_limits<int64_t>::max());

// One original tensor: name and global shape (and dtype in the manifest).
struct TensorInfo {
  std::string name;
  std::vector<int64_t> shape;
  std::string dtype = "float32";
};

// Identity of a model's parameter set: names and shapes, sorted by name, hashed (FNV-1a 64):
// "fnv1a64:<hex>:<tensors>:<elements>". Independent of the FSDP layout.
std::string ModelFingerprint(std::vector<TensorInfo> params);

// Everything in a manifest except the per-range data (plain values for LibTorch code).
struct CheckpointMeta {
  int format_version = kFormatVersion;
  int64_t step = 0;
  std::string model_fingerprint;
  int world_size = 1;
  std::string strategy;
  int shard_degree = 1;
  int64_t data_epoch = 0;
  int64_t data_position = 0;
  std::string rng_state;  // Bytes of rank 0's CPU generator state.
  std::string optimizer;  // "adamw", "sgd" or "" (no optimizer state).
  int64_t optimizer_step = 0;
  std::string job_id;
  int32_t attempt = 0;  // The job attempt that saved it (0: not under the coordinator).
  int64_t created_unix = 0;
  std::map<std::string, std::string> aliases;  // Alias -> canonical parameter name.
  std::vector<TensorInfo> tensors;             // Parameters, then "<param>#<state>" entries.
};

// What one rank did for one save (for the coordinator's ReportCheckpoint).
struct SaveEvent {
  int64_t step = 0;
  std::string step_dir;
  std::vector<std::string> files;  // Data files this rank wrote, or MANIFEST.json on commit.
  bool manifest_committed = false;
  int expected_files = 0;  // Data files of the step (= shard degree).
  // On the commit event: bytes of the step's files (manifest and data files) on disk; 0 when one
  // could not be sized.
  int64_t size_bytes = 0;
};

// "blocks.0.fc.weight#exp_avg" -> true with param "blocks.0.fc.weight", state "exp_avg".
bool SplitStateName(const std::string& name, std::string* param, std::string* state);

}  // namespace shardline::checkpoint

#endif  // SHARDLINE_CHECKPOINT_FORMAT_H_
