// Planner: places the W ranks of one job attempt on free slots (all or none) and computes each
// rank's groups.
//
// Layout (SMP v2 semantics, W = R x S, S = shard degree):
//   shard group g     = ranks [g*S, (g+1)*S)
//   replicate group j = { j, j+S, j+2S, ... }
// Placement packs each shard group onto as few nodes as possible (intra-node links are the
// fastest, and the shard group carries the all-gather / reduce-scatter traffic): a group goes to
// the node with the fewest free slots that still holds all S of it (best fit); a group no node
// holds takes the largest nodes first and best-fits its remainder (ties: the earlier node).
// Ranks of one node take its free slots in ascending index order. O(W log N) for N nodes.
//
// Thread safety: pure functions.
#ifndef SHARDLINE_COORDINATOR_PLANNER_H_
#define SHARDLINE_COORDINATOR_PLANNER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/job_spec.pb.h"

namespace shardline::coordinator {

// Free slots of one live worker.
struct NodeCapacity {
  std::string worker_id;
  std::string node_name;
  std::string address;
  std::vector<int32_t> free_slots;  // slot indices
};

struct RankPlan {
  int32_t rank = 0;
  std::string worker_id;
  std::string node_name;
  std::string address;
  int32_t slot_index = 0;
  // Rank among this job's ranks on the same node (ordered by global rank), and their number.
  int32_t local_rank = 0;
  int32_t local_world_size = 0;
  int32_t shard_group = 0;      // rank / S
  int32_t replicate_group = 0;  // rank % S
};

// Global ranks of the shard group and the replicate group of `rank`, in group order. Computed on
// demand: stored per rank they would take W * (S + W/S) integers (1 GiB at W = 16384, S = 1).
std::vector<int32_t> ShardGroupRanks(int32_t rank, int32_t shard_degree);
std::vector<int32_t> ReplicateGroupRanks(int32_t rank, int32_t shard_degree, int32_t world_size);

struct Plan {
  int32_t world_size = 0;
  int32_t shard_degree = 0;
  std::vector<RankPlan> ranks;  // indexed by rank
};

// Places `world_size` ranks with shard degree `shard_degree` on `nodes`.
// Errors: INVALID_ARGUMENT when world_size < 1, shard_degree < 1 or shard_degree does not divide
// world_size; RESOURCE_EXHAUSTED when fewer than world_size slots are free (message gives both
// numbers).
absl::StatusOr<Plan> PlanPlacement(int32_t world_size, int32_t shard_degree,
                                   const std::vector<NodeCapacity>& nodes);

// Shard degree S of `spec` run at world size `world_size`, by fsdp::ParallelLayout's rules
// (hybrid_shard_degree when >= 2, else W for FULL_SHARD / SHARD_GRAD_OP, 1 for NO_SHARD).
// Errors: INVALID_ARGUMENT from ParallelLayout::Create naming the values.
absl::StatusOr<int32_t> ShardDegreeFor(const JobSpec& spec, int32_t world_size);

// Whether `spec` can run at world size `w`: a valid shard degree, and train.global_batch_size
// divisible by micro_batch_size * w when both are set.
bool WorldSizeFits(const JobSpec& spec, int32_t w);

// World size of a restarted attempt with `free_slots` slots free: spec.world_size when it fits,
// else (when elastic.min_world_size allows shrinking) the largest valid w in
// [min_world_size, free_slots]. Returns 0 when no valid world size fits.
int32_t ElasticWorldSize(const JobSpec& spec, int32_t free_slots);

}  // namespace shardline::coordinator

#endif  // SHARDLINE_COORDINATOR_PLANNER_H_
