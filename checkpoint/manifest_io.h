// Reading and writing MANIFEST.json (the JSON form of shardline::CheckpointManifest, through
// protobuf's json_util, original field names). Torch-free: LibTorch code uses
// checkpoint_reader.h / sharded_checkpoint.h instead.
//
// Thread safety: pure functions.
#ifndef SHARDLINE_CHECKPOINT_MANIFEST_IO_H_
#define SHARDLINE_CHECKPOINT_MANIFEST_IO_H_

#include <string>

#include "absl/status/statusor.h"
#include "checkpoint/format.h"
#include "proto/checkpoint.pb.h"

namespace shardline::checkpoint {

absl::StatusOr<std::string> ManifestToJson(const CheckpointManifest& m);
// Errors: DATA_LOSS naming `what` (a path) for text that is not a manifest.
absl::StatusOr<CheckpointManifest> ManifestFromJson(const std::string& json,
                                                    const std::string& what);
// Atomic (format.h WriteFileAtomic).
absl::Status WriteManifestFile(const std::string& path, const CheckpointManifest& m);
// Errors: NOT_FOUND for a missing file; DATA_LOSS for unparsable text; FAILED_PRECONDITION for a
// format_version this code does not know (names the path and the version).
absl::StatusOr<CheckpointManifest> ReadManifestFile(const std::string& path);

// Plain-value copy of everything but the ranges.
CheckpointMeta MetaFromManifest(const CheckpointManifest& m);
void MetaToManifest(const CheckpointMeta& meta, CheckpointManifest* m);

}  // namespace shardline::checkpoint

#endif  // SHARDLINE_CHECKPOINT_MANIFEST_IO_H_
