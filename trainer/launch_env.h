// The trainer's launch environment: the launch contract read through its one reader
// (launch::ReadRankEnv, launch/rank_env.h), then what this trainer requires of it and fills in
// for this host:
//   - more than one rank without the coordinator's rendezvous (SHARDLINE_COORDINATOR and
//     SHARDLINE_RDZV_NAMESPACE): MASTER_ADDR and MASTER_PORT, the TCP store rank 0 serves, which
//     must not be torchrun's own agent store, and SHARDLINE_STORE_SECRET unless
//     SHARDLINE_STORE_INSECURE=1 (docs/security.md);
//   - SHARDLINE_ADVERTISE_ADDRESS unset: 127.0.0.1 when MASTER_ADDR is loopback (or unset), else
//     this host's name; SHARDLINE_NODE_NAME unset: this host's name;
//   - the open roots normalized ("/a/./b" -> "/a/b"), as common/open_beneath.h wants them.
//
// Thread safety: a pure function of the environment (and the host name).
#ifndef SHARDLINE_TRAINER_LAUNCH_ENV_H_
#define SHARDLINE_TRAINER_LAUNCH_ENV_H_

#include <functional>

#include "absl/status/statusor.h"
#include "launch/rank_env.h"

namespace shardline::trainer {

// Reads the environment through `getenv` (null: std::getenv; tests pass a fake).
// Errors: launch::ReadRankEnv's (INVALID_ARGUMENT naming the variable and value); INVALID_ARGUMENT
// for a standalone WORLD_SIZE > 1 without MASTER_ADDR / MASTER_PORT, or without the store's
// secret; FAILED_PRECONDITION for torchrun sharing its agent's store (the message names the fix).
absl::StatusOr<launch::RankEnv> ReadLaunchEnv(
    const std::function<const char*(const char*)>& getenv = nullptr);

}  // namespace shardline::trainer

#endif  // SHARDLINE_TRAINER_LAUNCH_ENV_H_
