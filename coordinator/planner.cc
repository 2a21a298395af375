#include "coordinator/planner.h"

#include <algorithm>
#include <numeric>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "fsdp/layout.h"

namespace shardline::coordinator {
namespace {

// Picks the nodes (and how many slots of each) for one group of `need` ranks, taking from
// `remaining` (free slots per node). Returns (node index, count) pairs.
std::vector<std::pair<size_t, int32_t>> PickNodes(std::vector<int32_t>& remaining, int32_t need) {
  std::vector<std::pair<size_t, int32_t>> picks;
  while (need > 0) {
    // Best fit: the node with the fewest free slots that holds all that is left.
    size_t best = remaining.size();
    for (size_t i = 0; i < remaining.size(); ++i) {
      if (remaining[i] >= need && (best == remaining.size() || remaining[i] < remaining[best])) {
        best = i;
      }
    }
    if (best == remaining.size()) {
      // No node holds the rest: take the largest node (fewest nodes for this group).
      best = 0;
      for (size_t i = 1; i < remaining.size(); ++i) {
        if (remaining[i] > remaining[best]) best = i;
      }
    }
    const int32_t take = std::min(need, remaining[best]);
    picks.emplace_back(best, take);
    remaining[best] -= take;
    need -= take;
  }
  return picks;
}

}  // namespace

absl::StatusOr<Plan> PlanPlacement(int32_t world_size, int32_t shard_degree,
                                   const std::vector<NodeCapacity>& nodes) {
  if (world_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("world_size must be >= 1, got ", world_size));
  }
  if (shard_degree < 1 || world_size % shard_degree != 0) {
    return absl::InvalidArgumentError(absl::StrCat("shard degree ", shard_degree,
                                                   " must be >= 1 and divide world_size ",
                                                   world_size));
  }
  std::vector<int32_t> remaining;
  int64_t total = 0;
  for (const NodeCapacity& n : nodes) {
    remaining.push_back(static_cast<int32_t>(n.free_slots.size()));
    total += n.free_slots.size();
  }
  if (total < world_size) {
    return absl::ResourceExhaustedError(absl::StrCat("needs ", world_size, " slots, ", total,
                                                     " free on ", nodes.size(), " nodes"));
  }
  Plan plan;
  plan.world_size = world_size;
  plan.shard_degree = shard_degree;
  plan.ranks.resize(world_size);
  std::vector<size_t> used(nodes.size(), 0);  // slots handed out per node
  std::vector<size_t> node_of(world_size);
  const int32_t groups = world_size / shard_degree;
  int32_t rank = 0;
  for (int32_t g = 0; g < groups; ++g) {
    for (const auto& [node, count] : PickNodes(remaining, shard_degree)) {
      for (int32_t k = 0; k < count; ++k, ++rank) {
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
    r.shard_group = r.rank / shard_degree;
    r.replicate_group = r.rank % shard_degree;
    for (int32_t k = 0; k < shard_degree; ++k) {
      r.shard_group_ranks.push_back(r.shard_group * shard_degree + k);
    }
    for (int32_t k = r.replicate_group; k < world_size; k += shard_degree) {
      r.replicate_group_ranks.push_back(k);
    }
  }
  return plan;
}

absl::StatusOr<int32_t> ShardDegreeFor(const JobSpec& spec, int32_t world_size) {
  // One definition of the layout rules for the whole project (fsdp/layout.h).
  auto layout = fsdp::ParallelLayout::Create(world_size, spec.fsdp().sharding_strategy(),
                                             spec.fsdp().hybrid_shard_degree());
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
