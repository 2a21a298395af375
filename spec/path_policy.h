// PathPolicy: where a job spec may make a worker read and write.
//
// A spec names files the trainer opens with the worker's user: the training data, a TorchScript
// module (loading one runs its code), a safetensors file to start from, and the checkpoint
// directory it writes and deletes in. Without a policy a user who can submit could read any file
// the worker's user can read and write anywhere it can write. An operator names the roots:
//
//   coordinator --read_roots=/data,/models --checkpoint_roots=/ckpt   (checked at submit)
//   worker      --read_roots=/data,/models --checkpoint_roots=/ckpt   (checked again at start)
//
// Each path field must be absolute, have no ".." component (after a symbolic link the kernel's
// ".." and the text's disagree: R/lnk/../x is not R/x when lnk points elsewhere) and, after
// removing "." lexically, lie inside one of its roots. The coordinator does not see the workers'
// file systems, so it checks the text; the worker also resolves symbolic links (of the longest
// existing prefix), so a link under a root that points outside it is refused too, refuses a read
// path that is not a regular file (/dev/zero, a FIFO), and walks the folders a job reads or
// writes in (model.hf_dir, checkpoint.resume_from, the job's own <checkpoint.dir>/<job id>),
// refusing a link below them that points outside the roots or to nothing. What remains: the
// check runs when the worker starts a rank, the trainer opens the files later by name, so a user
// who can write under a root can swap a checked file for a link in between (docs/security.md).
// Empty roots leave that kind of path unrestricted (the local single-user cluster); a deployment
// sets both.
//
// SpecPaths is the one list of a spec's path fields: a new path field is added there and both
// the policy and spec validation's file checks cover it.
//
// Thread safety: pure functions (CheckSpecPaths with resolve_links reads the file system).
#ifndef SHARDLINE_SPEC_PATH_POLICY_H_
#define SHARDLINE_SPEC_PATH_POLICY_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/job_spec.pb.h"

namespace shardline::spec {

// One path a spec names.
struct SpecPath {
  // kReadDir: a folder read (model.hf_dir); kCheckpoint: written in (checkpoint.dir is also read
  // and deleted in; train.tensorboard_dir only written); kCheckpointRead: a folder of checkpoints
  // only read (checkpoint.resume_from: another job's, where checkpoints live). The last two are
  // bounded by the checkpoint roots, the others by the read roots.
  enum class Access { kRead, kReadDir, kCheckpoint, kCheckpointRead };
  std::string field;  // "data.path", "data.paths[1]"
  std::string path;   // as in the spec (non-empty)
  Access access = Access::kRead;
};

// The set path fields of `spec`, in a fixed order.
std::vector<SpecPath> SpecPaths(const JobSpec& spec);

struct PathPolicy {
  std::vector<std::string> read_roots;        // data, models, weights; empty: any path
  std::vector<std::string> checkpoint_roots;  // checkpoint.dir; empty: any path
  // Who set the roots, for messages: "coordinator" or "worker <node>".
  std::string owner = "coordinator";

  bool restricted() const { return !read_roots.empty() || !checkpoint_roots.empty(); }
};

// Roots from flag values "a,b,c" (empty: none). Errors: INVALID_ARGUMENT naming `flag` for a
// relative root or one that is "/" only after normalizing (it would allow everything: leave the
// flag empty instead).
absl::StatusOr<std::vector<std::string>> ParseRoots(absl::string_view flag, absl::string_view csv);

// "/a/./b/../c//" -> "/a/c". Leading ".." of an absolute path stay at "/". Relative paths are
// normalized the same way (without a leading "/").
std::string NormalizePath(absl::string_view path);

// OK, or PERMISSION_DENIED listing every path outside its roots, one per line:
//   data.path: /etc/shadow is outside the read roots [/data, /models] allowed by the coordinator
//   (--read_roots)
// and INVALID_ARGUMENT-worthy relative paths as "must be an absolute path" lines (same status).
// With resolve_links, each path is also checked on disk as the file comment says (the worker's
// check); `job_id` names the job's own folder under checkpoint.dir ("" walks checkpoint.dir).
absl::Status CheckSpecPaths(const JobSpec& spec, const PathPolicy& policy, bool resolve_links,
                            absl::string_view job_id = "");

}  // namespace shardline::spec

#endif  // SHARDLINE_SPEC_PATH_POLICY_H_
