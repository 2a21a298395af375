// Durable names: creating, replacing and renaming files so that the new name survives a power
// cut. A rename or a new directory entry is durable only once its parent directory is fsynced,
// so every helper here ends with FsyncDir of the directories whose entries it changed. Every
// place in checkpoint/ that creates or renames a name that a commit relies on goes through
// these functions.
//
//   RETURN_IF_ERROR(MakeDirsDurable(step_dir));        // step_N/ and its entry in the root
//   RETURN_IF_ERROR(WriteFileAtomic(path, bytes));      // temp, fsync, rename, fsync dir
//   RETURN_IF_ERROR(RenameDurable(tmp, path));          // rename, fsync the target's dir
//
// Every call goes through common/write_beneath.h: with the trainer's write roots set, a name
// that resolves outside them is refused (PERMISSION_DENIED) instead of followed.
// Errors: INTERNAL naming the path (or directory) and the errno text.
// Thread safety: reentrant; the test hook is guarded by a mutex.
#ifndef SHARDLINE_CHECKPOINT_DURABLE_FILE_H_
#define SHARDLINE_CHECKPOINT_DURABLE_FILE_H_

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace shardline::checkpoint {

// fsync(2) of a directory: makes the creation, rename or removal of its entries durable.
absl::Status FsyncDir(const std::string& dir);

// Creates `dir` and any missing parents; after creating each one, fsyncs its parent (so the
// new entry survives a crash). An existing directory is not an error.
absl::Status MakeDirsDurable(const std::string& dir);

// rename(2) of `from` to `to`, then fsync of the directory of `to` (and of `from` when it is
// another directory). A failed rename leaves `from` in place.
absl::Status RenameDurable(const std::string& from, const std::string& to);

// Writes `data` to `path` so that a reader sees either the old file or the whole new one, and
// the new one survives a power cut: temp file, fsync, rename, fsync of the directory.
absl::Status WriteFileAtomic(const std::string& path, absl::string_view data);

// The directory holding `path` ("." for a bare name).
std::string ParentDir(const std::string& path);

// Tests only: `hook` (empty: none) sees the path of every directory FsyncDir syncs, after a
// successful fsync. Returns the previous hook.
using FsyncDirHook = std::function<void(const std::string& dir)>;
FsyncDirHook SetFsyncDirHookForTesting(FsyncDirHook hook);

}  // namespace shardline::checkpoint

#endif  // SHARDLINE_CHECKPOINT_DURABLE_FILE_H_
