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

std::vector<int> ParallelLayout::ShardGroupRanks(int rank) const {
  CheckRank(rank);
  const int first = ReplicateIndex(rank) * shard_degree_;
  std::vector<int> ranks;
  for (int r = first; r < first + shard_degree_; ++r) ranks.push_back(r);
  return ranks;
}

std::vector<int> ParallelLayout::ReplicateGroupRanks(int rank) const {
  CheckRank(rank);
  std::vector<int> ranks;
  for (int r = ShardIndex(rank); r < world_size_; r += shard_degree_) ranks.push_back(r);
  return ranks;
}

int ParallelLayout::ShardIndex(int rank) const {
  CheckRank(rank);
  return rank % shard_degree_;
}

int ParallelLayout::ReplicateIndex(int rank) const {
  CheckRank(rank);
  return rank / shard_degree_;
}

std::string ParallelLayout::DebugString() const {
  return absl::StrCat("W=", world_size_, " (R=", replicate_degree(), " x S=", shard_degree_, ") ",
                      StrategyName());
}

}  // namespace shardline::fsdp
