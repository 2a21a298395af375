// RankEnv: the launch contract of one trainer rank, the environment its launcher gives it, as one
// value. One writer, WriteRankEnv (the worker daemon builds each trainer's environment with it),
// and one reader, ReadRankEnv (the trainer reads these variables through it and nowhere else).
// The names are in launch/env_names.h.
//
// One channel per value. The rank's world size travels here only (WORLD_SIZE: the attempt's,
// which after an elastic restart is below the spec's world_size; the trainer puts it into its
// spec), and so does the coordinator's resume step (SHARDLINE_RESUME_STEP). The spec file the
// daemon writes beside the trainer is the job's spec as submitted; what the launch decides is
// here.
//
// Torch-free and proto-free: the daemon, the trainer and tests use it; it depends on nothing of
// ours. Thread safety: pure functions (ReadRankEnv with a null `getenv` reads this process's
// environment, which nothing may change meanwhile).
#ifndef SHARDLINE_LAUNCH_RANK_ENV_H_
#define SHARDLINE_LAUNCH_RANK_ENV_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace shardline::launch {

// A CUDA rank's device variables (worker/visible_devices.h decides them); nullopt: not set by
// the launcher, so the launcher's own value, if any, is inherited.
struct DeviceEnv {
  std::optional<std::string> cuda_visible_devices;  // CUDA_VISIBLE_DEVICES: the rank's GPU
  std::optional<std::string> cuda_device_order;     // CUDA_DEVICE_ORDER: PCI_BUS_ID or unset
  std::optional<std::string> nccl_socket_ifname;    // NCCL_SOCKET_IFNAME
};

struct RankEnv {
  // torchrun's. All unset: one process (rank 0 of 1). LOCAL_RANK unset: RANK.
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 0;  // 0 when unset; the trainer does not use it.
  std::string master_addr;   // "" when unset.
  int master_port = 0;       // 0 when unset; else in [1, 65535].

  // The worker daemon's; empty (0) when the trainer runs standalone.
  std::string coordinator;     // SHARDLINE_COORDINATOR: host:port
  std::string job_id;          // SHARDLINE_JOB_ID
  int attempt = 0;             // SHARDLINE_ATTEMPT
  std::string rdzv_namespace;  // SHARDLINE_RDZV_NAMESPACE: the attempt's rendezvous keys
  // SHARDLINE_RDZV_SECRET: reads that namespace, and is the attempt credential, the trainer's
  // only token (the bearer token of its reports and rendezvous calls).
  std::string rdzv_secret;
  // SHARDLINE_RESUME_STEP, from the coordinator's checkpoint registry: the only step of this
  // job's own checkpoints the trainer may resume (0: none of its own, start fresh or continue
  // checkpoint.resume_from). nullopt when unset (the trainer run by hand: the spec decides).
  std::optional<int64_t> resume_step;
  // SHARDLINE_RESUME_FROM_JOB: the job whose checkpoint checkpoint.resume_from names, as the
  // coordinator approved it; the trainer refuses a manifest of another job. "" when unset.
  std::string resume_from_job;
  // SHARDLINE_RANK_GENERATION: 0 for a rank's first process in the attempt; >= 1 for a
  // replacement of a lost replica group, which joins the running job (fault_tolerance
  // REPLICA_GROUPS) instead of starting or resuming.
  int rank_generation = 0;
  // SHARDLINE_ADVERTISE_ADDRESS: where this rank's collectives bind; "" when unset.
  std::string advertise_address;
  // SHARDLINE_NODE_NAME: the worker's --node_name, for messages; "" when unset.
  std::string node_name;
  // SHARDLINE_OPEN_ROOTS (absolute folders, ',' between): the trainer opens its input files
  // beneath them (common/open_beneath.h); empty when unset.
  std::vector<std::string> open_roots;
  // SHARDLINE_WRITE_ROOTS (absolute folders, ',' between): the trainer creates, writes, renames
  // and removes checkpoint and TensorBoard files beneath them (common/write_beneath.h); empty
  // when unset.
  std::vector<std::string> write_roots;
  DeviceEnv device;

  // A standalone launch's TCP bootstrap store (docs/security.md), never the daemon's.
  std::string store_secret;               // SHARDLINE_STORE_SECRET; "" when unset
  bool store_insecure = false;            // SHARDLINE_STORE_INSECURE=1
  bool torchelastic_agent_store = false;  // TORCHELASTIC_USE_AGENT_STORE=True (torchrun's)

  // An operator's settings, never the daemon's (inherited through it).
  std::optional<double> peak_flops;          // SHARDLINE_PEAK_FLOPS: one rank's FLOP/s, for MFU
  std::optional<double> cpu_memory_cap_mib;  // SHARDLINE_CPU_MEMORY_CAP_MIB
};

// The environment entries that hand `env` to a trainer process. Always written, even when empty,
// so that nothing in the launcher's own environment shows through: RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR and the daemon's SHARDLINE_* variables but SHARDLINE_RESUME_STEP
// and SHARDLINE_OPEN_ROOTS. Written only when set (the daemon leaves the rest unset, so that an
// operator's value on the daemon reaches its trainers): those two, the device variables,
// MASTER_PORT, the store's and the operator's settings. (The daemon removes SHARDLINE_OPEN_ROOTS
// from what its trainers inherit: env_names.h.)
// Errors: INVALID_ARGUMENT, naming the variable and value, for anything ReadRankEnv would refuse
// (the entries are read back to check) or read back otherwise (an open root holding a ',').
absl::StatusOr<std::map<std::string, std::string>> WriteRankEnv(const RankEnv& env);

// Reads the variables through `getenv` (null: std::getenv; tests pass a fake). A variable set
// to "" counts as unset.
// Errors: INVALID_ARGUMENT naming the variable and its value: an integer variable that is not
// an integer; RANK without WORLD_SIZE or the reverse; WORLD_SIZE < 1; RANK outside
// [0, WORLD_SIZE); a negative LOCAL_RANK, SHARDLINE_ATTEMPT, SHARDLINE_RANK_GENERATION or
// SHARDLINE_RESUME_STEP; LOCAL_RANK outside [0, LOCAL_WORLD_SIZE) when both are set;
// MASTER_PORT outside [1, 65535]; an open root that is not absolute; SHARDLINE_STORE_INSECURE
// other than 0 or 1; TORCHELASTIC_USE_AGENT_STORE other than True or False; a peak FLOP/s or
// memory cap that is not a positive number.
absl::StatusOr<RankEnv> ReadRankEnv(
    const std::function<const char*(const char*)>& getenv = nullptr);

}  // namespace shardline::launch

#endif  // SHARDLINE_LAUNCH_RANK_ENV_H_
