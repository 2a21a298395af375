// The launch environment (launch/rank_env.h) of the trainer process the daemon starts for one
// START assignment: the rank's place in the attempt (the attempt's world size: the only channel
// that carries it to the trainer), the attempt's rendezvous and credential, the coordinator's
// resume step, this node's coordinator address, name, address and path roots, and on a CUDA slot
// the rank's device. The daemon writes it with launch::WriteRankEnv.
//
// Thread safety: a pure function.
#ifndef SHARDLINE_WORKER_TRAINER_ENV_H_
#define SHARDLINE_WORKER_TRAINER_ENV_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "launch/rank_env.h"
#include "proto/coordinator.pb.h"
#include "spec/path_policy.h"

namespace shardline::worker {

// What of this node goes into every trainer's environment.
struct TrainerEnvNode {
  std::string coordinator_address;  // the daemon's --coordinator
  std::string advertise_address;    // the daemon's --address: the node's collectives bind here
  std::string node_name;
  // With both --read_roots and --checkpoint_roots set, the trainer opens its input files beneath
  // all of them (common/open_beneath.h). (A kind left unrestricted would make those reads
  // refused: then only the daemon's check at START holds.)
  spec::PathPolicy path_policy;
  // For CUDA slots (worker/visible_devices.h RankDeviceEnv): the daemon's inherited
  // CUDA_VISIBLE_DEVICES entries (nullopt: unset), the interface holding --address ("" for
  // none), and the daemon's own NCCL_SOCKET_IFNAME and CUDA_DEVICE_ORDER (nullopt: unset).
  std::optional<std::vector<std::string>> visible_devices;
  std::string nccl_ifname;
  std::optional<std::string> inherited_nccl_ifname;
  std::optional<std::string> inherited_device_order;
};

// Errors: OUT_OF_RANGE when a CUDA job's slot is not one of the node's GPUs (RankDeviceEnv).
absl::StatusOr<launch::RankEnv> TrainerEnvFor(const Assignment& a, const TrainerEnvNode& node);

}  // namespace shardline::worker

#endif  // SHARDLINE_WORKER_TRAINER_ENV_H_
