#include "fsdp/layout.h"

#include <cstdlib>
#include <iostream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace shardline::fsdp {
namespace {

constexpr ShardingStrategy kStrategies[] = {
    ShardingStrategy::kFullShard, ShardingStrategy::kShardGradOp, ShardingStrategy::kNoShard,
    ShardingStrategy::kHybridShard, ShardingStrategy::kHybridShardZero2};

std::string ValidStrategyNames() {
  std::vector<std::string> names;
  for (ShardingStrategy s : kStrategies) names.push_back(StrategyName(s));
  return absl::StrJoin(names, ", ");
}

void CheckShardIndex(const ParallelLayout& layout, int shard_index) {
  if (shard_index < 0 || shard_index >= layout.shard_degree()) {
    // A shard index outside [0, S) is a caller bug, as a rank outside the world is.
    std::cerr << "ParallelLayout: shard index " << shard_index << " outside [0, "
              << layout.shard_degree() << ")" << std::endl;
    std::abort();
  }
}

}  // namespace

std::string StrategyName(ShardingStrategy strategy) {
  switch (strategy) {
    case ShardingStrategy::kUnspecified:
      return "SHARDING_STRATEGY_UNSPECIFIED";
    case ShardingStrategy::kFullShard:
      return "FULL_SHARD";
    case ShardingStrategy::kShardGradOp:
      return "SHARD_GRAD_OP";
    case ShardingStrategy::kNoShard:
      return "NO_SHARD";
    case ShardingStrategy::kHybridShard:
      return "HYBRID_SHARD";
    case ShardingStrategy::kHybridShardZero2:
      return "HYBRID_SHARD_ZERO2";
    default:
      return absl::StrCat("UNKNOWN(", static_cast<int>(strategy), ")");
  }
}

absl::StatusOr<ShardingStrategy> ParseShardingStrategy(absl::string_view name) {
  for (ShardingStrategy s : kStrategies) {
    if (name == StrategyName(s)) return s;
  }
  return absl::InvalidArgumentError(absl::StrCat("fsdp.sharding_strategy: unknown strategy \"",
                                                 name, "\"; valid: ", ValidStrategyNames()));
}

absl::StatusOr<ParallelLayout> ParallelLayout::Create(int world_size, ShardingStrategy strategy,
                                                      int hybrid_shard_degree) {
  if (world_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("world_size: ", world_size, " is not a positive number of ranks"));
  }
  bool known = false;
  for (ShardingStrategy s : kStrategies) known = known || s == strategy;
  if (!known) {
    return absl::InvalidArgumentError(
        absl::StrCat("fsdp.sharding_strategy: ", ::shardline::fsdp::StrategyName(strategy),
                     " is not a strategy; valid: ", ValidStrategyNames()));
  }
  if (hybrid_shard_degree < 0 || hybrid_shard_degree == 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "fsdp.hybrid_shard_degree: ", hybrid_shard_degree,
        " is invalid; use 0 to keep the strategy or a degree >= 2 that divides world_size ",
        world_size, " (NO_SHARD replicates without sharding)"));
  }
  if (hybrid_shard_degree == 0) {
    switch (strategy) {
      case ShardingStrategy::kFullShard:
      case ShardingStrategy::kShardGradOp:
        return ParallelLayout(world_size, world_size, strategy);
      case ShardingStrategy::kNoShard:
        return ParallelLayout(world_size, 1, strategy);
      default:
        return absl::InvalidArgumentError(absl::StrCat(
            "fsdp.hybrid_shard_degree: ", ::shardline::fsdp::StrategyName(strategy),
            " needs a shard degree >= 2 that divides world_size ", world_size, ", got 0"));
    }
  }
  // degree >= 2: SageMaker forces hybrid sharding with this degree.
  if (world_size % hybrid_shard_degree != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("fsdp.hybrid_shard_degree: ", hybrid_shard_degree,
                     " does not divide world_size ", world_size));
  }
  ShardingStrategy effective = strategy == ShardingStrategy::kHybridShardZero2
                                   ? ShardingStrategy::kHybridShardZero2
                                   : ShardingStrategy::kHybridShard;
  return ParallelLayout(world_size, hybrid_shard_degree, effective);
}

absl::StatusOr<ParallelLayout> ParallelLayout::Create(int world_size, int spec_strategy,
                                                      int hybrid_shard_degree) {
  // Same numbers (see ShardingStrategy); an unknown value is refused by the call below.
  return Create(world_size, static_cast<ShardingStrategy>(spec_strategy), hybrid_shard_degree);
}

absl::StatusOr<ParallelLayout> ParallelLayout::Create(int world_size,
                                                      absl::string_view strategy_name,
                                                      int hybrid_shard_degree) {
  absl::StatusOr<ShardingStrategy> strategy = ParseShardingStrategy(strategy_name);
  if (!strategy.ok()) return strategy.status();
  return Create(world_size, *strategy, hybrid_shard_degree);
}

absl::StatusOr<ParallelLayout> ParallelLayout::ForShape(int world_size, int shard_degree) {
  if (world_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("world_size must be >= 1, got ", world_size));
  }
  if (shard_degree < 1 || world_size % shard_degree != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shard degree ", shard_degree, " must be >= 1 and divide world_size ", world_size));
  }
  const ShardingStrategy strategy =
      shard_degree == 1 ? ShardingStrategy::kNoShard
                        : (shard_degree == world_size ? ShardingStrategy::kFullShard
                                                      : ShardingStrategy::kHybridShard);
  return ParallelLayout(world_size, shard_degree, strategy);
}

bool ParallelLayout::reshard_after_forward() const {
  return strategy_ == ShardingStrategy::kFullShard || strategy_ == ShardingStrategy::kHybridShard;
}

void ParallelLayout::CheckRank(int rank) const {
  if (rank < 0 || rank >= world_size_) {
    // A rank outside the world is a caller bug; continuing would build wrong groups.
    std::cerr << "ParallelLayout: rank " << rank << " outside world of " << world_size_
              << std::endl;
    std::abort();
  }
}

void ParallelLayout::CheckGroup(int group) const {
  if (group < 0 || group >= replicate_degree()) {
    // As CheckRank: a group outside [0, R) is a caller bug.
    std::cerr << "ParallelLayout: group " << group << " outside the " << replicate_degree()
              << " groups of " << DebugString() << std::endl;
    std::abort();
  }
}

std::vector<int> ParallelLayout::ShardGroupRanks(int rank) const {
  CheckRank(rank);
  return RanksOfGroup(ReplicateIndex(rank));
}

std::vector<int> ParallelLayout::ReplicateGroupRanks(int rank) const {
  CheckRank(rank);
  return LiveGroups::All(*this).ReplicatePeers(ShardIndex(rank));
}

int ParallelLayout::ShardIndex(int rank) const {
  CheckRank(rank);
  return rank % shard_degree_;
}

int ParallelLayout::ReplicateIndex(int rank) const {
  CheckRank(rank);
  return rank / shard_degree_;
}

int ParallelLayout::RankOf(int group, int shard_index) const {
  CheckGroup(group);
  CheckShardIndex(*this, shard_index);
  return group * shard_degree_ + shard_index;
}

std::vector<int> ParallelLayout::RanksOfGroup(int group) const {
  CheckGroup(group);
  std::vector<int> ranks;
  for (int i = 0; i < shard_degree_; ++i) ranks.push_back(RankOf(group, i));
  return ranks;
}

std::string ParallelLayout::DebugString() const {
  return absl::StrCat("W=", world_size_, " (R=", replicate_degree(), " x S=", shard_degree_, ") ",
                      StrategyName());
}

absl::StatusOr<LiveGroups> LiveGroups::Create(const ParallelLayout& layout,
                                              const std::vector<int>& groups) {
  const int replicas = layout.replicate_degree();
  for (size_t i = 0; i < groups.size(); ++i) {
    const int g = groups[i];
    if (g < 0 || g >= replicas || (i > 0 && g <= groups[i - 1])) {
      return absl::InvalidArgumentError(absl::StrCat("live replica groups must ascend within [0, ",
                                                     replicas, "); got group ", g));
    }
  }
  return LiveGroups(layout, groups);
}

LiveGroups LiveGroups::Of(const ParallelLayout& layout, const std::set<int>& groups) {
  for (int g : groups) layout.RanksOfGroup(g);  // CHECKs the range.
  return LiveGroups(layout, std::vector<int>(groups.begin(), groups.end()));
}

LiveGroups LiveGroups::All(const ParallelLayout& layout) {
  std::vector<int> groups;
  for (int g = 0; g < layout.replicate_degree(); ++g) groups.push_back(g);
  return LiveGroups(layout, std::move(groups));
}

bool LiveGroups::Contains(int group) const { return PositionOf(group) >= 0; }

bool LiveGroups::ContainsRank(int rank) const { return Contains(layout_.ReplicateIndex(rank)); }

int LiveGroups::PositionOf(int group) const {
  for (size_t i = 0; i < groups_.size(); ++i) {
    if (groups_[i] == group) return static_cast<int>(i);
  }
  return -1;
}

std::vector<int> LiveGroups::Ranks() const {
  std::vector<int> ranks;
  for (int g : groups_) {
    for (int r : layout_.RanksOfGroup(g)) ranks.push_back(r);
  }
  return ranks;
}

std::vector<int> LiveGroups::ReplicatePeers(int shard_index) const {
  CheckShardIndex(layout_, shard_index);
  std::vector<int> ranks;
  for (int g : groups_) ranks.push_back(layout_.RankOf(g, shard_index));
  return ranks;
}

int LiveGroups::LeaderRank() const {
  return groups_.empty() ? -1 : layout_.RankOf(groups_.front(), 0);
}

}  // namespace shardline::fsdp
