// CreateCommGroups: the three communicators one rank needs for a layout W = R x S
// (fsdp/layout.h's ParallelLayout, whose ShardGroupRanks / ReplicateGroupRanks it uses).
//
//   world      all W ranks (buffer sync from rank 0, loss/metric reductions, barriers)
//   shard      this rank's shard group   [g*S, (g+1)*S), named "shard[g]"
//   replicate  this rank's replicate group {j, j+S, ...}, named "replicate[j]"
//
// Each group bootstraps under its own key prefix of the store ("<key_prefix>/world",
// "<key_prefix>/shard[g]", "<key_prefix>/replicate[j]"); a fresh key_prefix per job attempt
// keeps a restarted job from reading the addresses of the previous attempt. A group of one
// rank gets a LocalCommunicator (no sockets). Every rank of the world must call this with the
// same layout, store namespace and options; the calls connect world, then shard, then
// replicate, so no group waits on a rank busy elsewhere.
//
// Backends: kGloo (CPU tensors) is always linked. kNccl (CUDA tensors) is available when the
// binary links //fsdp:nccl_communicator (only defined on machines with CUDA), which registers
// itself here; otherwise CreateCommGroups returns FAILED_PRECONDITION.
//
// Thread safety: CreateCommGroups may be called from any thread; see communicator.h for
// the communicators themselves.
#ifndef SHARDLINE_FSDP_COMM_GROUPS_H_
#define SHARDLINE_FSDP_COMM_GROUPS_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "fsdp/communicator.h"
#include "fsdp/kv_store.h"
#include "fsdp/layout.h"

namespace shardline::fsdp {

enum class CommBackend { kGloo, kNccl };

// "gloo" / "nccl" -> backend. Errors: INVALID_ARGUMENT naming the bad name.
absl::StatusOr<CommBackend> ParseCommBackend(absl::string_view name);

struct CommOptions {
  CommBackend backend = CommBackend::kGloo;
  // Gloo: the address (IP or hostname) to bind and advertise; or a network interface name.
  std::string address = "127.0.0.1";
  std::string interface;
  // Bounds bootstrap and every collective.
  absl::Duration timeout = absl::Seconds(60);
  // Namespace of this job attempt in the store.
  std::string key_prefix = "comm";
  // NCCL: the CUDA device index of this rank (-1: the current device).
  int cuda_device = -1;
  // fsdp.fake_collectives: the shard and replicate groups (all the FSDP engine communicates
  // over) become NoOpCommunicators (fsdp/no_op_communicator.h: same shapes, no
  // communication) and open no sockets. The world group, the store rendezvous and the layout
  // agreement stay real, so the trainer's per-step loss/metric sums (a few scalars) and
  // checkpoint barriers still work. Every rank must agree (checked with the layout).
  bool fake_collectives = false;
};

struct CommGroups {
  std::unique_ptr<Communicator> world;
  std::unique_ptr<Communicator> shard;
  std::unique_ptr<Communicator> replicate;

  // Sets the step quoted in error messages on all three.
  void set_step(int64_t step);
};

// Before connecting, every rank publishes (world_size, shard_degree, backend, fake) under
// "<key_prefix>/layout/rank<r>" and checks that all ranks were given the same.
//
// Errors: INVALID_ARGUMENT for a rank outside the world, a null store, or ranks started with
// different layouts (naming both); DEADLINE_EXCEEDED naming the missing ranks if not all join
// within the timeout; FAILED_PRECONDITION for a backend not linked in; the communicators' bootstrap
// errors (DEADLINE_EXCEEDED / UNAVAILABLE, naming the group).
absl::StatusOr<CommGroups> CreateCommGroups(const ParallelLayout& layout, int rank, KvStore* store,
                                            const CommOptions& options);

// The communicators of one membership of a replica-group fault-tolerant job (docs/failures.md,
// "Replica-group fault tolerance"): `live_groups` (ascending replica group indices, including
// this rank's) are the replica groups still training. world = the live groups' ranks in group
// order (its rank is this rank's position there), shard = this rank's own group (S ranks, as in
// CreateCommGroups), replicate[j] = rank j of each live group, in group order (its rank is the
// position of this rank's group among the live groups). options.key_prefix must be fresh per
// membership epoch (the trainer passes "<attempt prefix>/ft/e<epoch>"); the layout check covers
// the members only.
// Errors: as CreateCommGroups; INVALID_ARGUMENT when live_groups do not ascend within [0, R) or
// lack this rank's group.
absl::StatusOr<CommGroups> CreateMemberCommGroups(const ParallelLayout& layout, int rank,
                                                  const std::vector<int>& live_groups,
                                                  KvStore* store, const CommOptions& options);

// One group's communicator: what a backend registers. `store` is already namespaced.
struct GroupSpec {
  std::string name;
  int rank = 0;  // Within the group.
  int size = 1;
  KvStore* store = nullptr;
  std::vector<int> ranks;  // The members' world ranks, in group-rank order (error messages).
};
using GroupCommunicatorFactory = std::function<absl::StatusOr<std::unique_ptr<Communicator>>(
    const GroupSpec& group, const CommOptions& options)>;

// Called once per backend at static-initialisation time by the backend's own file (the NCCL
// backend); returns true so it can initialise a static.
bool RegisterCommBackend(CommBackend backend, GroupCommunicatorFactory factory);

}  // namespace shardline::fsdp

#endif  // SHARDLINE_FSDP_COMM_GROUPS_H_
