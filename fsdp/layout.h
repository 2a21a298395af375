// ParallelLayout: the validated shape of the world, W = R x S (R replicate groups of S shard
// ranks), and the one place the rank-group arithmetic lives.
//
//   shard group g      = ranks [g*S, (g+1)*S)          (parameters are sharded across it)
//   replicate group j  = { j, j+S, j+2S, ... }          (shards are all-reduced across it)
//
// Create() applies SageMaker's `hybrid_shard_degree` semantics to the job spec's strategy:
//   degree 0  keeps the strategy: FULL_SHARD / SHARD_GRAD_OP -> S = W, NO_SHARD -> S = 1,
//             HYBRID_SHARD / HYBRID_SHARD_ZERO2 need a degree (error).
//   degree >= 2 forces HYBRID_SHARD (HYBRID_SHARD_ZERO2 stays ZERO2) with S = degree; S must
//             divide W.
//   degree 1 or negative is rejected (use NO_SHARD for S = 1).
// Every error is INVALID_ARGUMENT and names the offending values.
//
// Torch-free and proto-free on purpose: the coordinator and spec validation (which see the
// job-spec proto) and the engine and communicators (LibTorch code, which must not include a
// generated .pb.h: LibTorch ships older protobuf headers that shadow Debian's) all use this one
// definition. ShardingStrategy has the numbers of FsdpSpec::ShardingStrategy, so a spec's enum
// value is passed to Create as it is (checked by static_asserts in engine_options_from_spec.cc).
//
// Thread safety: an immutable value type; safe to share.
#ifndef SHARDLINE_FSDP_LAYOUT_H_
#define SHARDLINE_FSDP_LAYOUT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shardline::fsdp {

// The values of FsdpSpec::ShardingStrategy (proto/job_spec.proto), with the same numbers.
enum class ShardingStrategy : int {
  kUnspecified = 0,
  kFullShard = 1,
  kShardGradOp = 2,
  kNoShard = 3,
  kHybridShard = 4,
  kHybridShardZero2 = 5,
};

// Parses "FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD" or "HYBRID_SHARD_ZERO2".
// Errors: INVALID_ARGUMENT naming the bad name and listing the valid ones.
absl::StatusOr<ShardingStrategy> ParseShardingStrategy(absl::string_view name);

// "FULL_SHARD" etc.; "SHARDING_STRATEGY_UNSPECIFIED" for 0, "UNKNOWN(<n>)" for others.
std::string StrategyName(ShardingStrategy strategy);

class ParallelLayout {
 public:
  // See the file comment for the rules. Errors: INVALID_ARGUMENT naming the values, e.g.
  // "fsdp.hybrid_shard_degree: 5 does not divide world_size 4".
  static absl::StatusOr<ParallelLayout> Create(int world_size, ShardingStrategy strategy,
                                               int hybrid_shard_degree);
  // The same with the strategy as the job spec's enum value (FsdpSpec::ShardingStrategy, which
  // converts to int): callers holding a JobSpec pass spec.fsdp().sharding_strategy() as is.
  static absl::StatusOr<ParallelLayout> Create(int world_size, int spec_strategy,
                                               int hybrid_shard_degree);
  // The same with the strategy by name ("FULL_SHARD"; tests, tools). Errors: also
  // ParseShardingStrategy's.
  static absl::StatusOr<ParallelLayout> Create(int world_size, absl::string_view strategy_name,
                                               int hybrid_shard_degree);
  static absl::StatusOr<ParallelLayout> Create(int world_size, const char* strategy_name,
                                               int hybrid_shard_degree) {
    return Create(world_size, absl::string_view(strategy_name), hybrid_shard_degree);
  }

  // One rank, nothing sharded (NO_SHARD, W = S = 1): a placeholder until a real layout is set.
  ParallelLayout() : ParallelLayout(1, 1, ShardingStrategy::kNoShard) {}

  int world_size() const { return world_size_; }
  int shard_degree() const { return shard_degree_; }                    // S
  int replicate_degree() const { return world_size_ / shard_degree_; }  // R
  // The effective strategy (after hybrid_shard_degree forced HYBRID_SHARD, if it did).
  ShardingStrategy strategy() const { return strategy_; }
  // True when gathered parameters are freed after each unit's forward (FULL_SHARD,
  // HYBRID_SHARD); false when they stay until backward (SHARD_GRAD_OP, HYBRID_SHARD_ZERO2,
  // NO_SHARD).
  bool reshard_after_forward() const;

  // Global ranks of the shard group / replicate group that `rank` belongs to, ascending.
  // `rank` must be in [0, world_size()) (CHECKed: a wrong rank here is a programming error).
  std::vector<int> ShardGroupRanks(int rank) const;
  std::vector<int> ReplicateGroupRanks(int rank) const;
  // Position of `rank` inside its shard group (= which shard it holds), in [0, S).
  int ShardIndex(int rank) const;
  // Position of `rank` inside its replicate group (= which shard group it is in), in [0, R).
  int ReplicateIndex(int rank) const;

  std::string StrategyName() const { return ::shardline::fsdp::StrategyName(strategy_); }
  // "W=4 (R=2 x S=2) HYBRID_SHARD", for logs.
  std::string DebugString() const;

 private:
  ParallelLayout(int world_size, int shard_degree, ShardingStrategy strategy)
      : world_size_(world_size), shard_degree_(shard_degree), strategy_(strategy) {}
  void CheckRank(int rank) const;

  int world_size_;
  int shard_degree_;
  ShardingStrategy strategy_;
};

}  // namespace shardline::fsdp

#endif  // SHARDLINE_FSDP_LAYOUT_H_
