#include "fsdp/layout.h"

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "proto/job_spec.pb.h"

namespace shardline::fsdp {
namespace {

// Groups must partition the world; shard group g = [g*S, (g+1)*S), replicate j = {j, j+S, ...}.
void ExpectGroupsConsistent(const ParallelLayout& layout) {
  const int w = layout.world_size();
  const int s = layout.shard_degree();
  const int r = layout.replicate_degree();
  ASSERT_EQ(r * s, w);
  std::set<std::vector<int>> shard_groups, replicate_groups;
  for (int rank = 0; rank < w; ++rank) {
    std::vector<int> shard = layout.ShardGroupRanks(rank);
    std::vector<int> replicate = layout.ReplicateGroupRanks(rank);
    ASSERT_EQ(static_cast<int>(shard.size()), s);
    ASSERT_EQ(static_cast<int>(replicate.size()), r);
    const int g = layout.ReplicateIndex(rank);
    const int j = layout.ShardIndex(rank);
    EXPECT_EQ(rank, g * s + j);
    for (int i = 0; i < s; ++i) EXPECT_EQ(shard[i], g * s + i) << "rank " << rank;
    for (int i = 0; i < r; ++i) EXPECT_EQ(replicate[i], j + i * s) << "rank " << rank;
    EXPECT_EQ(shard[j], rank);
    EXPECT_EQ(replicate[g], rank);
    shard_groups.insert(shard);
    replicate_groups.insert(replicate);
  }
  EXPECT_EQ(static_cast<int>(shard_groups.size()), r);
  EXPECT_EQ(static_cast<int>(replicate_groups.size()), s);
}

TEST(ParallelLayout, KeepsStrategyWithDegreeZeroForEveryWorldSize) {
  struct Case {
    ShardingStrategy strategy;
    bool shard_all;  // S = W, else S = 1.
    bool reshard;
  };
  const Case cases[] = {{ShardingStrategy::kFullShard, true, true},
                        {ShardingStrategy::kShardGradOp, true, false},
                        {ShardingStrategy::kNoShard, false, false}};
  for (int w = 1; w <= 8; ++w) {
    for (const Case& c : cases) {
      SCOPED_TRACE(StrategyName(c.strategy) + " W=" + std::to_string(w));
      absl::StatusOr<ParallelLayout> layout = ParallelLayout::Create(w, c.strategy, 0);
      ASSERT_TRUE(layout.ok()) << layout.status();
      EXPECT_EQ(layout->world_size(), w);
      EXPECT_EQ(layout->shard_degree(), c.shard_all ? w : 1);
      EXPECT_EQ(layout->replicate_degree(), c.shard_all ? 1 : w);
      EXPECT_EQ(layout->strategy(), c.strategy);
      EXPECT_EQ(layout->reshard_after_forward(), c.reshard);
      ExpectGroupsConsistent(*layout);
    }
  }
}

TEST(ParallelLayout, DegreeForcesHybridForEveryDividingDegree) {
  const ShardingStrategy given[] = {ShardingStrategy::kFullShard, ShardingStrategy::kShardGradOp,
                                    ShardingStrategy::kNoShard, ShardingStrategy::kHybridShard,
                                    ShardingStrategy::kHybridShardZero2};
  for (int w = 1; w <= 8; ++w) {
    for (int s = 2; s <= 9; ++s) {
      for (ShardingStrategy strategy : given) {
        SCOPED_TRACE(StrategyName(strategy) + " W=" + std::to_string(w) +
                     " S=" + std::to_string(s));
        absl::StatusOr<ParallelLayout> layout = ParallelLayout::Create(w, strategy, s);
        if (w % s != 0) {
          ASSERT_EQ(layout.status().code(), absl::StatusCode::kInvalidArgument);
          EXPECT_EQ(layout.status().message(), "fsdp.hybrid_shard_degree: " + std::to_string(s) +
                                                   " does not divide world_size " +
                                                   std::to_string(w));
          continue;
        }
        ASSERT_TRUE(layout.ok()) << layout.status();
        EXPECT_EQ(layout->shard_degree(), s);
        EXPECT_EQ(layout->replicate_degree(), w / s);
        const ShardingStrategy expected = strategy == ShardingStrategy::kHybridShardZero2
                                              ? ShardingStrategy::kHybridShardZero2
                                              : ShardingStrategy::kHybridShard;
        EXPECT_EQ(layout->strategy(), expected);
        EXPECT_EQ(layout->reshard_after_forward(), expected == ShardingStrategy::kHybridShard);
        ExpectGroupsConsistent(*layout);
      }
    }
  }
}

TEST(ParallelLayout, ExampleGroupsForFourRanksOfTwo) {
  absl::StatusOr<ParallelLayout> layout =
      ParallelLayout::Create(4, ShardingStrategy::kFullShard, 2);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->ShardGroupRanks(3), (std::vector<int>{2, 3}));
  EXPECT_EQ(layout->ReplicateGroupRanks(3), (std::vector<int>{1, 3}));
  EXPECT_EQ(layout->ShardGroupRanks(0), (std::vector<int>{0, 1}));
  EXPECT_EQ(layout->ReplicateGroupRanks(0), (std::vector<int>{0, 2}));
  EXPECT_EQ(layout->DebugString(), "W=4 (R=2 x S=2) HYBRID_SHARD");
}

TEST(ParallelLayout, RejectsDegreeNotDividingWorld) {
  absl::StatusOr<ParallelLayout> layout =
      ParallelLayout::Create(4, ShardingStrategy::kFullShard, 5);
  ASSERT_EQ(layout.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(layout.status().message(), "fsdp.hybrid_shard_degree: 5 does not divide world_size 4");
}

TEST(ParallelLayout, RejectsDegreeOneAndNegative) {
  for (int degree : {1, -1, -4}) {
    absl::StatusOr<ParallelLayout> layout =
        ParallelLayout::Create(4, ShardingStrategy::kFullShard, degree);
    ASSERT_EQ(layout.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(layout.status().message().find("fsdp.hybrid_shard_degree: " + std::to_string(degree) +
                                             " is invalid"),
              std::string::npos)
        << layout.status();
  }
}

TEST(ParallelLayout, RejectsHybridWithoutDegree) {
  for (ShardingStrategy s : {ShardingStrategy::kHybridShard, ShardingStrategy::kHybridShardZero2}) {
    absl::StatusOr<ParallelLayout> layout = ParallelLayout::Create(4, s, 0);
    ASSERT_EQ(layout.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(layout.status().message().find(StrategyName(s) + " needs a shard degree"),
              std::string::npos)
        << layout.status();
    EXPECT_NE(layout.status().message().find("world_size 4"), std::string::npos);
  }
}

TEST(ParallelLayout, RejectsUnspecifiedStrategyAndBadWorld) {
  absl::StatusOr<ParallelLayout> layout =
      ParallelLayout::Create(4, ShardingStrategy::kUnspecified, 0);
  ASSERT_EQ(layout.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(layout.status().message().find("SHARDING_STRATEGY_UNSPECIFIED is not a strategy"),
            std::string::npos)
      << layout.status();

  layout = ParallelLayout::Create(0, ShardingStrategy::kFullShard, 0);
  ASSERT_EQ(layout.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(layout.status().message().find("world_size: 0"), std::string::npos);
}

// The coordinator and spec validation pass the job spec's enum as it is.
TEST(ParallelLayout, TakesTheSpecEnumWithTheSameNumbers) {
  absl::StatusOr<ParallelLayout> layout =
      ParallelLayout::Create(4, ::shardline::FsdpSpec::HYBRID_SHARD_ZERO2, 2);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->strategy(), ShardingStrategy::kHybridShardZero2);
  EXPECT_EQ(layout->DebugString(), "W=4 (R=2 x S=2) HYBRID_SHARD_ZERO2");
  absl::StatusOr<ParallelLayout> bad = ParallelLayout::Create(4, 9, 0);
  ASSERT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("UNKNOWN(9) is not a strategy"), std::string::npos)
      << bad.status();
}

TEST(ParallelLayout, TakesTheStrategyByName) {
  absl::StatusOr<ParallelLayout> layout = ParallelLayout::Create(6, "SHARD_GRAD_OP", 3);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->DebugString(), "W=6 (R=2 x S=3) HYBRID_SHARD");
  EXPECT_EQ(ParallelLayout::Create(4, "FULLY_SHARDED", 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ParallelLayout, DefaultIsOneUnshardedRank) {
  const ParallelLayout layout;
  EXPECT_EQ(layout.DebugString(), "W=1 (R=1 x S=1) NO_SHARD");
  EXPECT_FALSE(layout.reshard_after_forward());
}

TEST(ParallelLayout, ForShapePicksTheStrategyOfTheShape) {
  absl::StatusOr<ParallelLayout> layout = ParallelLayout::ForShape(6, 3);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->DebugString(), "W=6 (R=2 x S=3) HYBRID_SHARD");
  layout = ParallelLayout::ForShape(4, 4);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->DebugString(), "W=4 (R=1 x S=4) FULL_SHARD");
  layout = ParallelLayout::ForShape(4, 1);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->DebugString(), "W=4 (R=4 x S=1) NO_SHARD");
  layout = ParallelLayout::ForShape(1, 1);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->DebugString(), "W=1 (R=1 x S=1) NO_SHARD");
}

TEST(ParallelLayout, ForShapeRejectsABadShapeNamingIt) {
  absl::StatusOr<ParallelLayout> layout = ParallelLayout::ForShape(0, 1);
  ASSERT_EQ(layout.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(layout.status().message(), "world_size must be >= 1, got 0");
  for (int s : {0, -2, 3, 5}) {
    layout = ParallelLayout::ForShape(4, s);
    ASSERT_EQ(layout.status().code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_EQ(layout.status().message(),
              "shard degree " + std::to_string(s) + " must be >= 1 and divide world_size 4");
  }
}

// W = 6, S = 3: groups {0, 1, 2} and {3, 4, 5}.
TEST(ParallelLayout, RankOfInvertsTheGroupAndShardIndex) {
  absl::StatusOr<ParallelLayout> layout = ParallelLayout::Create(6, "HYBRID_SHARD", 3);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->RanksOfGroup(0), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(layout->RanksOfGroup(1), (std::vector<int>{3, 4, 5}));
  EXPECT_EQ(layout->RankOf(1, 2), 5);
  EXPECT_EQ(layout->RankOf(0, 1), 1);
  for (int rank = 0; rank < 6; ++rank) {
    EXPECT_EQ(layout->RankOf(layout->ReplicateIndex(rank), layout->ShardIndex(rank)), rank);
    EXPECT_EQ(layout->RanksOfGroup(layout->ReplicateIndex(rank)), layout->ShardGroupRanks(rank));
  }
}

TEST(ParallelLayout, AGroupOrShardIndexOutsideTheLayoutAborts) {
  absl::StatusOr<ParallelLayout> layout = ParallelLayout::Create(6, "HYBRID_SHARD", 3);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_DEATH(layout->RanksOfGroup(2), "group 2 outside the 2 groups of W=6");
  EXPECT_DEATH(layout->RankOf(0, 3), "shard index 3 outside \\[0, 3\\)");
  EXPECT_DEATH(LiveGroups::Of(*layout, {0, 2}), "group 2 outside");
}

TEST(LiveGroups, AllGroupsAreTheLayoutsOwnGroups) {
  absl::StatusOr<ParallelLayout> layout = ParallelLayout::Create(6, "HYBRID_SHARD", 3);
  ASSERT_TRUE(layout.ok()) << layout.status();
  const LiveGroups all = LiveGroups::All(*layout);
  EXPECT_EQ(all.groups(), (std::vector<int>{0, 1}));
  EXPECT_EQ(all.Ranks(), (std::vector<int>{0, 1, 2, 3, 4, 5}));
  for (int rank = 0; rank < 6; ++rank) {
    EXPECT_TRUE(all.ContainsRank(rank));
    EXPECT_EQ(all.ReplicatePeers(layout->ShardIndex(rank)), layout->ReplicateGroupRanks(rank));
    EXPECT_EQ(all.PositionOf(layout->ReplicateIndex(rank)), layout->ReplicateIndex(rank));
  }
  EXPECT_EQ(all.ReplicatePeers(2), (std::vector<int>{2, 5}));
  EXPECT_EQ(all.LeaderRank(), 0);
}

// W = 8, S = 2 with replica group 1 (ranks 2-3) lost: groups 0, 2, 3 train on.
TEST(LiveGroups, WithAGroupLostTheMembersAndReplicatePeersSkipIt) {
  absl::StatusOr<ParallelLayout> layout = ParallelLayout::Create(8, "HYBRID_SHARD", 2);
  ASSERT_TRUE(layout.ok()) << layout.status();
  absl::StatusOr<LiveGroups> live = LiveGroups::Create(*layout, {0, 2, 3});
  ASSERT_TRUE(live.ok()) << live.status();
  EXPECT_EQ(live->size(), 3);
  EXPECT_EQ(live->Ranks(), (std::vector<int>{0, 1, 4, 5, 6, 7}));
  EXPECT_EQ(live->ReplicatePeers(0), (std::vector<int>{0, 4, 6}));
  EXPECT_EQ(live->ReplicatePeers(1), (std::vector<int>{1, 5, 7}));
  EXPECT_TRUE(live->Contains(2));
  EXPECT_FALSE(live->Contains(1));
  EXPECT_FALSE(live->Contains(4));
  EXPECT_FALSE(live->ContainsRank(2));
  EXPECT_FALSE(live->ContainsRank(3));
  EXPECT_TRUE(live->ContainsRank(5));
  EXPECT_EQ(live->PositionOf(0), 0);
  EXPECT_EQ(live->PositionOf(2), 1);
  EXPECT_EQ(live->PositionOf(3), 2);
  EXPECT_EQ(live->PositionOf(1), -1);
  EXPECT_EQ(live->LeaderRank(), 0);
  // The same members from a set (the coordinator's bookkeeping).
  const LiveGroups of = LiveGroups::Of(*layout, {3, 0, 2});
  EXPECT_EQ(of.groups(), live->groups());
  EXPECT_EQ(of.Ranks(), live->Ranks());
  // Group 0 lost too: the lowest live group's first rank leads.
  absl::StatusOr<LiveGroups> without_zero = LiveGroups::Create(*layout, {2, 3});
  ASSERT_TRUE(without_zero.ok()) << without_zero.status();
  EXPECT_EQ(without_zero->LeaderRank(), 4);
  EXPECT_EQ(without_zero->ReplicatePeers(1), (std::vector<int>{5, 7}));
}

TEST(LiveGroups, NoLiveGroupHasNoMembersAndNoLeader) {
  absl::StatusOr<ParallelLayout> layout = ParallelLayout::Create(4, "HYBRID_SHARD", 2);
  ASSERT_TRUE(layout.ok()) << layout.status();
  absl::StatusOr<LiveGroups> none = LiveGroups::Create(*layout, {});
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->empty());
  EXPECT_TRUE(none->Ranks().empty());
  EXPECT_TRUE(none->ReplicatePeers(1).empty());
  EXPECT_EQ(none->LeaderRank(), -1);
  EXPECT_FALSE(none->ContainsRank(0));
}

TEST(LiveGroups, CreateRejectsGroupsThatDoNotAscendWithinTheLayout) {
  absl::StatusOr<ParallelLayout> layout = ParallelLayout::Create(6, "HYBRID_SHARD", 2);
  ASSERT_TRUE(layout.ok()) << layout.status();  // R = 3
  const std::vector<std::pair<std::vector<int>, int>> bad = {
      {{1, 0}, 0}, {{0, 0}, 0}, {{0, 3}, 3}, {{-1}, -1}, {{0, 2, 1}, 1}};
  for (const auto& [groups, named] : bad) {
    absl::StatusOr<LiveGroups> live = LiveGroups::Create(*layout, groups);
    ASSERT_EQ(live.status().code(), absl::StatusCode::kInvalidArgument) << named;
    EXPECT_EQ(live.status().message(),
              "live replica groups must ascend within [0, 3); got group " + std::to_string(named));
  }
}

TEST(ParseShardingStrategy, ParsesEveryValidName) {
  for (ShardingStrategy s :
       {ShardingStrategy::kFullShard, ShardingStrategy::kShardGradOp, ShardingStrategy::kNoShard,
        ShardingStrategy::kHybridShard, ShardingStrategy::kHybridShardZero2}) {
    absl::StatusOr<ShardingStrategy> parsed = ParseShardingStrategy(StrategyName(s));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, s);
  }
}

TEST(ParseShardingStrategy, RejectsUnknownNameListingValidOnes) {
  for (const char* bad : {"FULL_SHARDED", "full_shard", "", "SHARDING_STRATEGY_UNSPECIFIED"}) {
    absl::StatusOr<ShardingStrategy> parsed = ParseShardingStrategy(bad);
    ASSERT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(parsed.status().message(),
              std::string("fsdp.sharding_strategy: unknown strategy \"") + bad +
                  "\"; valid: FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD, "
                  "HYBRID_SHARD_ZERO2");
  }
}

}  // namespace
}  // namespace shardline::fsdp
