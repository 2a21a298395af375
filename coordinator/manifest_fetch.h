// FetchManifest: the coordinator's read of a checkpoint's MANIFEST.json for GetCheckpoint.
//
// The step directory's path comes from a trainer's report, and the coordinator sees it only when
// the checkpoint volume is shared with it. So the read is best-effort for an absent or unreadable
// file (the response then carries the registry's info alone), but refuses what could hurt the
// coordinator: a file that is not regular (a FIFO would block a gRPC thread), one too large, or
// a read that hangs (bounded_file_read.h does the read on a helper thread).
//
// Thread safety: a pure function; may be called from any thread (never under the core's lock).
#ifndef SHARDLINE_COORDINATOR_MANIFEST_FETCH_H_
#define SHARDLINE_COORDINATOR_MANIFEST_FETCH_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/checkpoint.pb.h"

namespace shardline::coordinator {

// The manifest in `step_dir`, or nullopt when it is missing, unreadable, not valid JSON or of
// another format version. Errors: FAILED_PRECONDITION when it is not a regular file,
// OUT_OF_RANGE when it is larger than any manifest can be, DEADLINE_EXCEEDED after `timeout`.
absl::StatusOr<std::optional<CheckpointManifest>> FetchManifest(const std::string& step_dir,
                                                                absl::Duration timeout);

}  // namespace shardline::coordinator

#endif  // SHARDLINE_COORDINATOR_MANIFEST_FETCH_H_
