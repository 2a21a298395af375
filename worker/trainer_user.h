// TrainerUser: the unprivileged Unix user the worker daemon runs trainers as (--trainer_user).
//
// A trainer runs job code: a TorchScript model is a program (aten::from_file reads any file its
// user may read, print writes it into the rank log the job's owner reads). Run as the daemon's
// user, it could read the node's join token and mTLS key. Run as a user of its own, it reaches
// only what that user may: the daemon checks at start that this user can run the trainer and
// reach the work directory and the checkpoint roots, and cannot read any credential file.
//
// What it does not do: separate jobs from one another. Every trainer on the node is the same
// user, so one job's code can read another's files on that node (docs/security.md); jobs that
// must not see each other need nodes (or containers) of their own.
#ifndef SHARDLINE_WORKER_TRAINER_USER_H_
#define SHARDLINE_WORKER_TRAINER_USER_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace shardline::worker {

struct TrainerUser {
  std::string name;
  uid_t uid = 0;
  gid_t gid = 0;              // the user's primary group: the group of the rank files
  std::vector<gid_t> groups;  // supplementary groups (getgrouplist), set in the child
};

// Looks `name` up in the user database. Errors: INVALID_ARGUMENT naming --trainer_user when the
// daemon is not root (it could not switch user), the user does not exist, or it is root.
absl::StatusOr<TrainerUser> ResolveTrainerUser(const std::string& name);

// Switches the calling process to `user` (supplementary groups, group, user, in that order, and
// checks that root cannot be regained). Only async-signal-safe calls: for a child between fork
// and execve. Returns 0, or the errno of the call that failed.
int DropToTrainerUser(const TrainerUser& user);

// What the daemon checks, as the trainer user, before it serves (paths may be empty: skipped).
struct TrainerUserChecks {
  std::string trainer;                        // must be executable (--trainer)
  std::string work_dir;                       // must be traversable (--work_dir)
  std::vector<std::string> writable_dirs;     // must be writable (--checkpoint_roots)
  std::vector<std::string> credential_files;  // must NOT be readable (--join_token_file, --tls_key)
};

// Runs the checks in a child switched to `user` (so permissions, ACLs and every directory on
// the way are the kernel's answer, not a guess from mode bits). INVALID_ARGUMENT naming the
// flag, the path and the fix for the first that fails.
absl::Status CheckTrainerUser(const TrainerUser& user, const TrainerUserChecks& checks);

}  // namespace shardline::worker

#endif  // SHARDLINE_WORKER_TRAINER_USER_H_
