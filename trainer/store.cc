#include "trainer/store.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/client.h"
#include "client/client_tls.h"
#include "common/status_macros.h"
#include "fsdp/tcp_kv_store.h"
#include "trainer/rendezvous_kv_store.h"

namespace shardline::trainer {
namespace {

// One process: communicators of size 1 need no peers, but CreateCommGroups wants a store.
class InMemoryKvStore : public fsdp::KvStore {
 public:
  absl::Status Set(absl::string_view key, absl::string_view value) override {
    absl::MutexLock lock(&mu_);
    data_[std::string(key)] = std::string(value);
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<std::string>> Get(const std::vector<std::string>& keys,
                                               absl::Duration timeout) override {
    absl::MutexLock lock(&mu_);
    std::vector<std::string> out;
    for (const std::string& k : keys) {
      auto it = data_.find(k);
      if (it == data_.end()) {
        return absl::DeadlineExceededError(absl::StrCat("key \"", k, "\" was never set"));
      }
      out.push_back(it->second);
    }
    return out;
  }

 private:
  absl::Mutex mu_;
  std::map<std::string, std::string> data_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

absl::StatusOr<std::unique_ptr<fsdp::KvStore>> CreateBootstrapStore(const launch::RankEnv& env,
                                                                    absl::Duration timeout) {
  if (!env.coordinator.empty() && !env.rdzv_namespace.empty()) {
    // TLS as the worker daemon says (SHARDLINE_TLS_CA, SHARDLINE_INSECURE).
    ASSIGN_OR_RETURN(std::unique_ptr<client::CoordinatorClient> client,
                     client::ClientFromEnv(env.coordinator, env.rdzv_secret));
    return std::unique_ptr<fsdp::KvStore>(std::make_unique<RendezvousKvStore>(
        std::shared_ptr<client::CoordinatorClient>(std::move(client)), env.rdzv_namespace,
        env.rdzv_secret));
  }
  if (env.world_size == 1) return std::unique_ptr<fsdp::KvStore>(new InMemoryKvStore());
  fsdp::TcpKvStore::Options o;
  o.host = env.master_addr;
  o.port = env.master_port;
  o.serve = env.rank == 0;
  o.secret = env.store_secret;
  o.connect_timeout = timeout;
  auto store = fsdp::TcpKvStore::Create(o);
  if (!store.ok()) {
    return absl::Status(store.status().code(),
                        absl::StrCat("store at MASTER_ADDR=", env.master_addr, " MASTER_PORT=",
                                     env.master_port, ": ", store.status().message()));
  }
  return std::unique_ptr<fsdp::KvStore>(std::move(*store));
}

}  // namespace shardline::trainer
