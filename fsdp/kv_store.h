// KvStore: the small key-value interface that communicators bootstrap through (Gloo pair
// addresses, NCCL unique ids). Implementations: FileKvStore (a shared directory), TcpKvStore
// (rank 0 serves, like torchrun's MASTER_ADDR/MASTER_PORT store), and the coordinator's
// rendezvous RPC (trainer/rendezvous_kv_store.h). Keys are opaque strings; values are bytes.
//
// Thread safety: implementations are safe to call from several threads.
#ifndef SHARDLINE_FSDP_KV_STORE_H_
#define SHARDLINE_FSDP_KV_STORE_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace shardline::fsdp {

class KvStore {
 public:
  virtual ~KvStore() = default;

  // Stores `value` under `key`, replacing any previous value.
  // Errors: UNAVAILABLE when the store cannot be reached.
  virtual absl::Status Set(absl::string_view key, absl::string_view value) = 0;

  // Returns the values of `keys` in order, waiting until every key exists.
  // Errors: DEADLINE_EXCEEDED naming the missing keys after `timeout`; UNAVAILABLE when the
  // store cannot be reached.
  virtual absl::StatusOr<std::vector<std::string>> Get(const std::vector<std::string>& keys,
                                                       absl::Duration timeout) = 0;
};

}  // namespace shardline::fsdp

#endif  // SHARDLINE_FSDP_KV_STORE_H_
