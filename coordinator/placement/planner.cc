#include "coordinator/placement/planner.h"

#include <algorithm>
#include <numeric>
#include <set>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "fsdp/layout.h"

namespace shardline::coordinator {
namespace {

// Free slots per node, ordered by (free slots, node index); nodes with none left are dropped.
using FreeSet = std::set<std::pair<int32_t, size_t>>;

// Picks the nodes (and how many slots of each) for one group of `need` ranks, taking from
// `free`. Returns (node index, count) pairs.
std::vector<std::pair<size_t, int32_t>> PickNodes(FreeSet& free, int32_t need) {
  std::vector<std::pair<size_t, int32_t>> picks;
  while (need > 0 && !free.empty()) {
    // Best fit: the node with the fewest free slots that holds all that is left ...
    auto it = free.lower_bound({need, 0});
    if (it == free.end()) {
      // ... else the largest node (fewest nodes for this group), the earliest among equals.
      it = free.lower_bound({std::prev(free.end())->first, 0});
    }
    const auto [have, node] = *it;
    free.erase(it);
    const int32_t take = std::min(need, have);
    picks.emplace_back(node, take);
    if (have > take) free.insert({have - take, node});
    need -= take;
  }
  return picks;
}

}  // namespace

absl::StatusOr<Plan> PlanPlacement(const fsdp::ParallelLayout& layout,
                                   const std::vector<NodeCapacity>& nodes) {
  const int32_t world_size = layout.world_size();
  FreeSet free;
  int64_t total = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (!nodes[i].free_slots.empty()) {
      free.insert({static_cast<int32_t>(nodes[i].free_slots.size()), i});
    }
    total += nodes[i].free_slots.size();
  }
  if (total < world_size) {
    return absl::ResourceExhaustedError(
        absl::StrCat("needs ", world_size, " slots, ", total, " free on ", nodes.size(), " nodes"));
  }
  Plan plan;
  plan.world_size = world_size;
  plan.shard_degree = layout.shard_degree();
  plan.ranks.resize(world_size);
  std::vector<size_t> used(nodes.size(), 0);  // slots handed out per node
  std::vector<size_t> node_of(world_size);
  for (int32_t first = 0; first < world_size; ++first) {
    if (layout.ShardIndex(first) != 0) continue;  // each shard group once, from its first rank
    const std::vector<int> group = layout.ShardGroupRanks(first);
    size_t next = 0;
    for (const auto& [node, count] : PickNodes(free, static_cast<int32_t>(group.size()))) {
      for (int32_t k = 0; k < count; ++k) {
        const int32_t rank = group[next++];
        RankPlan& r = plan.ranks[rank];
        node_of[rank] = node;
        r.rank = rank;
        r.worker_id = nodes[node].worker_id;
        r.node_name = nodes[node].node_name;
        r.address = nodes[node].address;
        r.slot_index = nodes[node].free_slots[used[node]++];
      }
    }
  }
  // Local ranks: order of global rank among the ranks sharing a worker.
  std::vector<int32_t> local_count(nodes.size(), 0);
  for (RankPlan& r : plan.ranks) {
    r.local_rank = local_count[node_of[r.rank]]++;
  }
  for (RankPlan& r : plan.ranks) {
    r.local_world_size = local_count[node_of[r.rank]];
    r.shard_group = layout.ReplicateIndex(r.rank);
    r.replicate_group = layout.ShardIndex(r.rank);
  }
  return plan;
}

absl::StatusOr<Plan> PlanPlacement(int32_t world_size, int32_t shard_degree,
                                   const std::vector<NodeCapacity>& nodes) {
  absl::StatusOr<fsdp::ParallelLayout> layout =
      fsdp::ParallelLayout::ForShape(world_size, shard_degree);
  if (!layout.ok()) return layout.status();
  return PlanPlacement(*layout, nodes);
}

absl::StatusOr<fsdp::ParallelLayout> LayoutFor(const JobSpec& spec, int32_t world_size) {
  // One definition of the layout rules for the whole project (fsdp/layout.h).
  return fsdp::ParallelLayout::Create(world_size, spec.fsdp().sharding_strategy(),
                                      spec.fsdp().hybrid_shard_degree());
}

absl::StatusOr<int32_t> ShardDegreeFor(const JobSpec& spec, int32_t world_size) {
  auto layout = LayoutFor(spec, world_size);
  if (!layout.ok()) return layout.status();
  return layout->shard_degree();
}

bool WorldSizeFits(const JobSpec& spec, int32_t w) {
  if (w < 1 || !ShardDegreeFor(spec, w).ok()) return false;
  const int64_t gbs = spec.train().global_batch_size();
  const int64_t mbs = spec.train().micro_batch_size();
  if (gbs > 0 && mbs > 0 && gbs % (mbs * w) != 0) return false;
  return true;
}

int32_t ElasticWorldSize(const JobSpec& spec, int32_t free_slots) {
  const int32_t full = spec.world_size();
  if (free_slots >= full) return WorldSizeFits(spec, full) ? full : 0;
  const int32_t min_w = spec.elastic().min_world_size();
  if (min_w <= 0 || min_w >= full) return 0;
  for (int32_t w = std::min(free_slots, full - 1); w >= min_w; --w) {
    if (WorldSizeFits(spec, w)) return w;
  }
  return 0;
}

}  // namespace shardline::coordinator
