// OpenForRead: a trainer's input files opened beneath the path policy's roots at the moment of
// the open, not only at the worker's check before the trainer starts.
//
// The worker checks a spec's paths when it starts a rank (spec/path_policy.h): links resolved,
// folders walked. The trainer opens the files later, by name, so a user who can write under a
// root could swap a checked file for a link out of the roots in between. With roots set, each
// open here starts from the root's directory and lets the kernel resolve the rest with
// openat2(2) RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS: a component that leaves the root (a link
// to /etc, "..") fails the open, whatever the file system looked like at the check.
//
// The roots are the worker's --read_roots and --checkpoint_roots (a read may be of either kind:
// checkpoint.resume_from reads under the checkpoint roots); the worker passes them to the trainer
// as SHARDLINE_OPEN_ROOTS (launch/rank_env.h) and the trainer sets them once at start, before it
// opens any file, so every reader in data/, checkpoint/ and models/ obeys them without a parameter
// threaded through. No roots (a local cluster, a trainer run by hand): a plain open, as before.
//
// On a kernel without openat2 (before 5.6) the path is resolved with realpath, checked against
// the resolved roots and opened with O_NOFOLLOW: the window between the two is not closed there.
//
// Thread safety: SetOpenRoots before any other thread opens files; OpenForRead from any thread.
#ifndef SHARDLINE_COMMON_OPEN_BENEATH_H_
#define SHARDLINE_COMMON_OPEN_BENEATH_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shardline {

// Whether `path` is `root` or lies below it, by the text (both absolute and normalized; "/"
// holds every path). The one definition of "inside a root" for the path policy's checks
// (spec/path_policy.h) and the opens here.
bool PathIsUnder(absl::string_view path, absl::string_view root);

// The longest of `roots` that holds `path` by its text; "" when none does (common/write_beneath.h
// picks its root the same way).
std::string LongestRootHolding(absl::string_view path, const std::vector<std::string>& roots);

// Sets the roots every later OpenForRead stays beneath (absolute, normalized; empty: none).
void SetOpenRoots(std::vector<std::string> roots);
std::vector<std::string> OpenRoots();

// A read-only descriptor (O_CLOEXEC) of the regular file at `path`, which the caller closes.
// `what` names the file in messages ("data file", "model.torchscript_path"). Errors: NOT_FOUND
// when it does not exist; PERMISSION_DENIED when it cannot be opened, is outside every root, or
// resolves out of its root ("... resolves outside the root R (a symbolic link or \"..\" leaves
// it)"); FAILED_PRECONDITION when it is not a regular file (a FIFO is opened without blocking
// and refused).
absl::StatusOr<int> OpenForRead(const std::string& path, absl::string_view what);

// The whole file at `path`, opened by OpenForRead (small files: manifests, vocabularies, JSON
// configs). Errors: OpenForRead's; PERMISSION_DENIED for a read error.
absl::StatusOr<std::string> ReadFileBeneath(const std::string& path, absl::string_view what);

}  // namespace shardline

#endif  // SHARDLINE_COMMON_OPEN_BENEATH_H_
