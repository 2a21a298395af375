// Writes beneath the checkpoint roots: a trainer's checkpoint and TensorBoard files created,
// written, renamed and removed beneath the worker's --checkpoint_roots at the moment of each
// call, as common/open_beneath.h does for reads.
//
// The worker checks `checkpoint.dir` and `train.tensorboard_dir` (links resolved) when it starts a
// rank, but what the trainer writes lies below them, under names it makes later: the job's folder
// `<checkpoint.dir>/<job id>`, `step_N/`, shard and manifest files. A user who can write under a
// root can plant a link at one of those names (a job's id is known at submit, while the job
// waits) to a folder outside the roots, and the trainer would follow it. With roots set, every
// operation here resolves the name's folder from its root's directory with openat2(2)
// RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS and acts on the last component relative to that folder
// (openat2 for files, mkdirat, renameat, unlinkat; a tree is removed without following a link):
// a path that leaves its root fails, whatever the file system looked like at the check.
//
// The roots are the worker's --checkpoint_roots, passed as SHARDLINE_WRITE_ROOTS
// (launch/rank_env.h) and set once at start (SetWriteRoots) before any file is written. No roots
// (a local cluster, a tool run by hand): the plain calls, as before. Only absolute links inside a
// root are refused even when they point back into it (RESOLVE_BENEATH treats every absolute link
// as leaving); relative links that stay beneath the root are followed.
//
// Errors: PERMISSION_DENIED for a path outside every root or one that resolves out of its root
// ("... resolves outside the root R (a symbolic link or \"..\" leaves it); refused at the write");
// INTERNAL naming the operation, the path and the errno text otherwise (NOT_FOUND from
// UnlinkBeneath for a missing name).
// Thread safety: SetWriteRoots before any other thread writes; the rest from any thread.
#ifndef SHARDLINE_COMMON_WRITE_BENEATH_H_
#define SHARDLINE_COMMON_WRITE_BENEATH_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace shardline {

// Sets the roots every later call stays beneath (absolute, normalized; empty: none).
void SetWriteRoots(std::vector<std::string> roots);
std::vector<std::string> WriteRoots();

// open(path, flags | O_CLOEXEC, mode) beneath the roots (the last component never followed);
// the caller closes the descriptor.
absl::StatusOr<int> OpenForWrite(const std::string& path, int flags, mode_t mode);

// A read-only descriptor of the folder `dir` (for fsync).
absl::StatusOr<int> OpenDirBeneath(const std::string& dir);

// mkdir(dir, mode), its parent resolved beneath the roots. An existing entry is not an error
// (the caller learns what it is from the next open, which is checked again).
absl::Status MakeDirBeneath(const std::string& dir, mode_t mode);

// rename(from, to), both folders resolved beneath the roots (one root holds both).
absl::Status RenameBeneath(const std::string& from, const std::string& to);

// unlink(path), its folder resolved beneath the roots. NOT_FOUND when it (or its folder) is
// missing.
absl::Status UnlinkBeneath(const std::string& path);

// Removes `dir` and everything in it, never following a link (a link is removed, not its
// target). A missing `dir` is not an error.
absl::Status RemoveTreeBeneath(const std::string& dir);

}  // namespace shardline

#endif  // SHARDLINE_COMMON_WRITE_BENEATH_H_
