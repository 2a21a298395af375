// Secret files: tokens (and files that hold one, such as shardctl's config and the local
// cluster's cluster.json) live in files only their owner can read. Every reader checks that
// with CheckOwnerOnlyFile, so a token file left readable by the group or the world is refused
// with the fix, instead of being used (and kept readable) silently; writers create the file
// with mode 0600 from the start (never chmod after writing, which leaves a window).
//
// Thread safety: the functions are thread-safe (no shared state).
#ifndef SHARDLINE_COMMON_SECRET_FILE_H_
#define SHARDLINE_COMMON_SECRET_FILE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shardline {

// OK when `path` is a regular file without group or world permissions (mode & 077 == 0).
// `what` names where the path came from ("--token_file") and starts the message. Errors:
// NOT_FOUND when it cannot be stat'ed; PERMISSION_DENIED naming the file, its mode and the fix
// ("run `chmod 600 FILE`"); INVALID_ARGUMENT when it is not a regular file.
absl::Status CheckOwnerOnlyFile(const std::string& path, absl::string_view what);

// The first line of the token file `path`, whitespace stripped, after CheckOwnerOnlyFile.
// Errors: those of CheckOwnerOnlyFile; INVALID_ARGUMENT when the file is empty.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path, absl::string_view what);

// Writes `content` to `path` atomically (a temporary beside it, renamed over it), the file
// created with mode 0600 whatever the umask. Errors: INTERNAL naming the file and errno.
absl::Status WriteOwnerOnlyFile(const std::string& path, absl::string_view content);

// 32 random bytes from the kernel (/dev/urandom), as 64 hex characters.
std::string RandomToken();

}  // namespace shardline

#endif  // SHARDLINE_COMMON_SECRET_FILE_H_
