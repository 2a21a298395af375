// RendezvousKvStore: fsdp::KvStore over the coordinator's rendezvous RPCs, for trainers run by
// the coordinator (their assignment names the namespace and secret). Torch-free.
//
// Get waits in slices (the server caps one wait) until every key exists or `timeout` passes;
// UNAVAILABLE from the coordinator (e.g. while it restarts) is retried within the timeout. Set
// retries UNAVAILABLE too, for up to `set_retry_for` (setting a key again is harmless): a
// restarted coordinator reloads the attempt's values, so a rank that set a key during the
// restart carries on instead of failing the attempt.
//
// Thread safety: safe to call from several threads (the client is).
#ifndef SHARDLINE_TRAINER_RENDEZVOUS_KV_STORE_H_
#define SHARDLINE_TRAINER_RENDEZVOUS_KV_STORE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "client/client.h"
#include "fsdp/kv_store.h"

namespace shardline::trainer {

class RendezvousKvStore : public fsdp::KvStore {
 public:
  // `client` is shared with the caller (it may also report progress through it).
  RendezvousKvStore(std::shared_ptr<client::CoordinatorClient> client, std::string ns,
                    std::string secret, absl::Duration set_retry_for = absl::Seconds(60))
      : client_(std::move(client)),
        ns_(std::move(ns)),
        secret_(std::move(secret)),
        set_retry_for_(set_retry_for) {}

  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::vector<std::string>> Get(const std::vector<std::string>& keys,
                                               absl::Duration timeout) override;

 private:
  std::shared_ptr<client::CoordinatorClient> client_;
  const std::string ns_;
  const std::string secret_;
  const absl::Duration set_retry_for_;
};

}  // namespace shardline::trainer

#endif  // SHARDLINE_TRAINER_RENDEZVOUS_KV_STORE_H_
