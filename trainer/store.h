// The key-value store a trainer rank bootstraps its communicators through:
//   * under the worker daemon (SHARDLINE_COORDINATOR + SHARDLINE_RDZV_NAMESPACE set): the
//     coordinator's rendezvous (trainer/rendezvous_kv_store.h), namespaced per job attempt;
//   * standalone with WORLD_SIZE > 1: a TcpKvStore at MASTER_ADDR:MASTER_PORT, served by rank 0
//     (like torchrun's c10d store);
//   * a single process: an in-memory store (nothing to exchange).
//
// Thread safety: the returned stores are thread-safe.
#ifndef SHARDLINE_TRAINER_STORE_H_
#define SHARDLINE_TRAINER_STORE_H_

#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "fsdp/kv_store.h"
#include "launch/rank_env.h"

namespace shardline::trainer {

// Errors: UNAVAILABLE when rank 0 cannot bind MASTER_PORT (the message names the address);
// INVALID_ARGUMENT for a bad coordinator address.
absl::StatusOr<std::unique_ptr<fsdp::KvStore>> CreateBootstrapStore(const launch::RankEnv& env,
                                                                    absl::Duration timeout);

}  // namespace shardline::trainer

#endif  // SHARDLINE_TRAINER_STORE_H_
