#include "trainer/launch_env.h"

#include <unistd.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "spec/path_policy.h"

namespace shardline::trainer {
namespace {

bool Loopback(const std::string& addr) {
  return addr.empty() || addr == "localhost" || addr.rfind("127.", 0) == 0;
}

std::string HostName() {
  char host[256] = {0};
  return gethostname(host, sizeof(host) - 1) == 0 ? host : "";
}

// More than one rank without the coordinator's rendezvous: the TCP store rank 0 serves on
// MASTER_PORT, which every rank must be able to find and which must be safe to use.
absl::Status CheckStandaloneStore(const launch::RankEnv& e) {
  const bool rendezvous = !e.coordinator.empty() && !e.rdzv_namespace.empty();
  if (e.world_size <= 1 || rendezvous) return absl::OkStatus();
  if (e.master_addr.empty() || e.master_port == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "environment: WORLD_SIZE=", e.world_size,
        " needs MASTER_ADDR and MASTER_PORT (the TCP store rank 0 serves), as torchrun sets"));
  }
  // torchrun (torch.distributed.elastic) by default shares its agent's c10d TCPStore with the
  // ranks: MASTER_PORT is then that store, which rank 0 cannot bind and whose protocol is not
  // ours. Say so at once, on every rank, rather than rank 0 failing to bind while the others
  // wait for it.
  if (e.torchelastic_agent_store) {
    return absl::FailedPreconditionError(absl::StrCat(
        "environment TORCHELASTIC_USE_AGENT_STORE=True: torchrun's agent serves its own store "
        "on MASTER_PORT=",
        e.master_port,
        ", which rank 0 needs for Shardline's bootstrap store; launch with "
        "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 in torchrun's environment (and the c10d "
        "rendezvous: the default, or --standalone), so that torchrun hands the ranks a free "
        "MASTER_PORT"));
  }
  // Anyone who can reach MASTER_PORT could read and overwrite the bootstrap keys (and so point
  // ranks at their own Gloo peers): off loopback any host, on loopback any local user. The
  // store needs the launcher's secret either way.
  if (e.store_secret.empty() && !e.store_insecure) {
    return absl::InvalidArgumentError(absl::StrCat(
        "environment: MASTER_ADDR=", e.master_addr,
        Loopback(e.master_addr) ? " is loopback (any local user can reach it)" : " is not loopback",
        " and SHARDLINE_STORE_SECRET is unset: give every rank the same random secret (e.g. "
        "`export SHARDLINE_STORE_SECRET=$(openssl rand -hex 32)`), or set "
        "SHARDLINE_STORE_INSECURE=1 to run the store without one"));
  }
  return absl::OkStatus();
}

// This host's defaults for what the launcher left unset.
void FillHostDefaults(launch::RankEnv& e) {
  // Loopback jobs stay on loopback; otherwise bind where MASTER_ADDR's peers can reach us.
  if (e.advertise_address.empty()) {
    e.advertise_address = Loopback(e.master_addr) ? "127.0.0.1" : HostName();
  }
  if (e.node_name.empty()) e.node_name = HostName();
  for (std::string& root : e.open_roots) root = spec::NormalizePath(root);
  for (std::string& root : e.write_roots) root = spec::NormalizePath(root);
}

}  // namespace

absl::StatusOr<launch::RankEnv> ReadLaunchEnv(
    const std::function<const char*(const char*)>& getenv) {
  absl::StatusOr<launch::RankEnv> e = launch::ReadRankEnv(getenv);
  if (!e.ok()) return e.status();
  if (absl::Status s = CheckStandaloneStore(*e); !s.ok()) return s;
  FillHostDefaults(*e);
  return e;
}

}  // namespace shardline::trainer
