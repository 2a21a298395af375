// Planner: places the W ranks of one job attempt on free slots (all or none).
//
// Which ranks form a shard group and a replicate group is fsdp::ParallelLayout's (fsdp/layout.h,
// the one definition the trainers use too); the planner only asks it. Placement packs each shard
// group onto as few nodes as possible (intra-node links are the fastest, and the shard group
// carries the all-gather / reduce-scatter traffic): a group goes to the node with the fewest free
// slots that still holds all S of it (best fit); a group no node holds takes the largest nodes
// first and best-fits its remainder (ties: the earlier node). Ranks of one node take its free
// slots in ascending index order. O(W log N) for N nodes.
//
// Thread safety: pure functions.
#ifndef SHARDLINE_COORDINATOR_PLACEMENT_PLANNER_H_
#define SHARDLINE_COORDINATOR_PLACEMENT_PLANNER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "fsdp/layout.h"
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
  int32_t shard_group = 0;      // which shard group: ParallelLayout::ReplicateIndex(rank)
  int32_t replicate_group = 0;  // which replicate group: ParallelLayout::ShardIndex(rank)
};

struct Plan {
  int32_t world_size = 0;
  int32_t shard_degree = 0;
  std::vector<RankPlan> ranks;  // indexed by rank
};

// Places the ranks of `layout` on `nodes`, each shard group packed as above.
// Errors: RESOURCE_EXHAUSTED when fewer than world_size slots are free (message gives both
// numbers).
absl::StatusOr<Plan> PlanPlacement(const fsdp::ParallelLayout& layout,
                                   const std::vector<NodeCapacity>& nodes);
// The same for a bare shape (tests, the benchmark): the layout with S = shard_degree (NO_SHARD
// for 1, FULL_SHARD for world_size, HYBRID_SHARD otherwise). Errors: INVALID_ARGUMENT when
// world_size < 1, shard_degree < 1 or shard_degree does not divide world_size; as above.
absl::StatusOr<Plan> PlanPlacement(int32_t world_size, int32_t shard_degree,
                                   const std::vector<NodeCapacity>& nodes);

// The layout of `spec` run at world size `world_size` (ParallelLayout::Create with the spec's
// sharding strategy and hybrid_shard_degree). Errors: INVALID_ARGUMENT naming the values.
absl::StatusOr<fsdp::ParallelLayout> LayoutFor(const JobSpec& spec, int32_t world_size);
// Its shard degree S (hybrid_shard_degree when >= 2, else W for FULL_SHARD / SHARD_GRAD_OP, 1 for
// NO_SHARD). Errors: as LayoutFor.
absl::StatusOr<int32_t> ShardDegreeFor(const JobSpec& spec, int32_t world_size);

// Whether `spec` can run at world size `w`: a valid shard degree, and train.global_batch_size
// divisible by micro_batch_size * w when both are set.
bool WorldSizeFits(const JobSpec& spec, int32_t w);

// World size of a restarted attempt with `free_slots` slots free: spec.world_size when it fits,
// else (when elastic.min_world_size allows shrinking) the largest valid w in
// [min_world_size, free_slots]. Returns 0 when no valid world size fits.
int32_t ElasticWorldSize(const JobSpec& spec, int32_t free_slots);

}  // namespace shardline::coordinator

#endif  // SHARDLINE_COORDINATOR_PLACEMENT_PLANNER_H_
