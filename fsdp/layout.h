// ParallelLayout: the validated shape of the world, W = R x S (R replicate groups of S shard
// ranks), and the one place the rank-group arithmetic lives.
//
//   shard group g      = ranks [g*S, (g+1)*S)          (parameters are sharded across it)
//   replicate group j  = { j, j+S, j+2S, ... }          (shards are all-reduced across it)
//
// A rank's (group, shard index) is (ReplicateIndex, ShardIndex); RankOf is the inverse. With
// replica-group fault tolerance (docs/failures.md) shard group g is "replica group g", the unit
// that is lost and replaced; LiveGroups (below) is the view of one membership epoch: the groups
// still training, their ranks, and the replicate peers among them.
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

#include <set>
#include <string>
#include <utility>
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
  // A bare shape, for callers that hold (W, S) rather than a spec (the coordinator's stored
  // shard degree, the planner's tests): NO_SHARD for S = 1, FULL_SHARD for S = W, HYBRID_SHARD
  // otherwise. Errors: INVALID_ARGUMENT "world_size must be >= 1, got 0" or "shard degree 3 must
  // be >= 1 and divide world_size 4".
  static absl::StatusOr<ParallelLayout> ForShape(int world_size, int shard_degree);

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
  // The inverse: the rank holding shard `shard_index` in shard group `group`. Ranks of shard
  // group `group`, ascending. `group` in [0, R) and `shard_index` in [0, S) (CHECKed).
  int RankOf(int group, int shard_index) const;
  std::vector<int> RanksOfGroup(int group) const;

  std::string StrategyName() const { return ::shardline::fsdp::StrategyName(strategy_); }
  // "W=4 (R=2 x S=2) HYBRID_SHARD", for logs.
  std::string DebugString() const;

 private:
  ParallelLayout(int world_size, int shard_degree, ShardingStrategy strategy)
      : world_size_(world_size), shard_degree_(shard_degree), strategy_(strategy) {}
  void CheckRank(int rank) const;
  void CheckGroup(int group) const;

  int world_size_;
  int shard_degree_;
  ShardingStrategy strategy_;
};

// The members of one membership epoch of a replica-group fault-tolerant job: a layout and its
// live replica groups (ascending group indices; every group at epoch 0, fewer after losses). The
// coordinator's quorum, the trainer's communicators (comm_groups.h's CreateMemberCommGroups) and
// the checkpoint writer all ask it, so "the members" has one definition:
//
//   Ranks()                  the live groups' ranks, group by group: the epoch's world
//   ReplicatePeers(j)        rank j of each live group, in group order: replicate[j] of the epoch
//   PositionOf(g)            group g's place among the live groups (its rank in replicate[j])
//   LeaderRank()             the lowest live group's first rank
//
// Example: W = 8, S = 2 with group 1 lost: groups {0, 2, 3}, Ranks() = {0, 1, 4, 5, 6, 7},
// ReplicatePeers(1) = {1, 5, 7}, PositionOf(2) = 1, LeaderRank() = 0.
// An immutable value (copies the layout); safe to share.
class LiveGroups {
 public:
  // `groups` from outside (a vote's decision). Errors: INVALID_ARGUMENT when they do not ascend
  // within [0, R), e.g. "live replica groups must ascend within [0, 3); got group 0". Empty is
  // allowed (no member).
  static absl::StatusOr<LiveGroups> Create(const ParallelLayout& layout,
                                           const std::vector<int>& groups);
  // A caller's own bookkeeping (ascending by construction); every group must be in [0, R)
  // (CHECKed: a wrong group here is a programming error).
  static LiveGroups Of(const ParallelLayout& layout, const std::set<int>& groups);
  // Every replica group live (epoch 0, or a job without fault tolerance).
  static LiveGroups All(const ParallelLayout& layout);

  const ParallelLayout& layout() const { return layout_; }
  const std::vector<int>& groups() const { return groups_; }  // ascending
  int size() const { return static_cast<int>(groups_.size()); }
  bool empty() const { return groups_.empty(); }
  bool Contains(int group) const;
  // Whether `rank`'s group is live; `rank` in [0, W) (CHECKed).
  bool ContainsRank(int rank) const;
  // Position of `group` among the live groups, or -1 when it is not live.
  int PositionOf(int group) const;
  // The members' global ranks, group by group (ascending); size() * S of them.
  std::vector<int> Ranks() const;
  // The member holding shard `shard_index` (in [0, S), CHECKed) in each live group, in group
  // order: the replicate group of that shard index among the live groups.
  std::vector<int> ReplicatePeers(int shard_index) const;
  // The first rank of the lowest live group (the epoch's leader); -1 when none is live.
  int LeaderRank() const;

 private:
  LiveGroups(const ParallelLayout& layout, std::vector<int> groups)
      : layout_(layout), groups_(std::move(groups)) {}

  ParallelLayout layout_;
  std::vector<int> groups_;
};

}  // namespace shardline::fsdp

#endif  // SHARDLINE_FSDP_LAYOUT_H_
