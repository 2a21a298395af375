#include "coordinator/placement/planner.h"

#include <map>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace shardline::coordinator {
namespace {

std::vector<NodeCapacity> Nodes(const std::vector<int>& sizes) {
  std::vector<NodeCapacity> nodes;
  for (size_t i = 0; i < sizes.size(); ++i) {
    NodeCapacity n;
    n.worker_id = absl::StrCat("w", i);
    n.node_name = absl::StrCat("node", i);
    n.address = absl::StrCat("10.0.0.", i);
    for (int s = 0; s < sizes[i]; ++s) n.free_slots.push_back(s);
    nodes.push_back(n);
  }
  return nodes;
}

// The layout PlanPlacement(w, s, nodes) places: shard degree s.
fsdp::ParallelLayout ShapeLayout(int w, int s) {
  auto layout = fsdp::ParallelLayout::ForShape(w, s);
  EXPECT_TRUE(layout.ok()) << layout.status();
  return layout.ok() ? *layout : fsdp::ParallelLayout();
}

// Every invariant a valid plan has, whatever the placement heuristic chose.
void CheckValid(const Plan& plan, int w, int s, const std::vector<NodeCapacity>& nodes) {
  const fsdp::ParallelLayout layout = ShapeLayout(w, s);
  ASSERT_EQ(layout.shard_degree(), s);
  ASSERT_EQ(plan.world_size, w);
  ASSERT_EQ(static_cast<int>(plan.ranks.size()), w);
  std::set<std::pair<std::string, int>> used;
  std::map<std::string, std::vector<int>> by_node;
  for (int r = 0; r < w; ++r) {
    const RankPlan& p = plan.ranks[r];
    EXPECT_EQ(p.rank, r);
    EXPECT_TRUE(used.insert({p.worker_id, p.slot_index}).second)
        << "slot used twice: " << p.worker_id << "/" << p.slot_index;
    bool slot_exists = false;
    for (const NodeCapacity& n : nodes) {
      if (n.worker_id != p.worker_id) continue;
      EXPECT_EQ(p.node_name, n.node_name);
      EXPECT_EQ(p.address, n.address);
      for (int32_t f : n.free_slots) slot_exists |= f == p.slot_index;
    }
    EXPECT_TRUE(slot_exists);
    by_node[p.worker_id].push_back(r);
    // The groups are the layout's (fsdp/layout.h, whose test checks their formula), the ones
    // the trainers build.
    EXPECT_EQ(p.shard_group, layout.ReplicateIndex(r));
    EXPECT_EQ(p.replicate_group, layout.ShardIndex(r));
    const std::vector<int> shard = layout.ShardGroupRanks(r);
    ASSERT_EQ(static_cast<int>(shard.size()), s);
    for (int q : shard) EXPECT_EQ(plan.ranks[q].shard_group, p.shard_group);
    const std::vector<int> rep = layout.ReplicateGroupRanks(r);
    ASSERT_EQ(static_cast<int>(rep.size()), layout.replicate_degree());
    for (int q : rep) EXPECT_EQ(plan.ranks[q].replicate_group, p.replicate_group);
  }
  for (const auto& [node, ranks] : by_node) {
    for (size_t i = 0; i < ranks.size(); ++i) {
      EXPECT_EQ(plan.ranks[ranks[i]].local_rank, static_cast<int>(i));
      EXPECT_EQ(plan.ranks[ranks[i]].local_world_size, static_cast<int>(ranks.size()));
    }
  }
}

int NodesSpanned(const Plan& plan, int group) {
  std::set<std::string> n;
  for (const RankPlan& r : plan.ranks) {
    if (r.shard_group == group) n.insert(r.worker_id);
  }
  return static_cast<int>(n.size());
}

TEST(Planner, EveryValidWorldAndShardDegreeOnEqualNodes) {
  for (int node_size : {1, 2, 4, 8}) {
    for (int w = 1; w <= 32; ++w) {
      for (int s = 1; s <= w; ++s) {
        if (!fsdp::ParallelLayout::ForShape(w, s).ok()) continue;  // s does not divide w
        const auto nodes = Nodes(std::vector<int>((w + node_size - 1) / node_size + 1, node_size));
        auto plan = PlanPlacement(w, s, nodes);
        ASSERT_TRUE(plan.ok()) << plan.status();
        SCOPED_TRACE(absl::StrCat("node_size ", node_size, " W ", w, " S ", s));
        CheckValid(*plan, w, s, nodes);
        // Each group on as few nodes as the node size allows, when groups tile nodes evenly.
        if (node_size % s == 0 || s % node_size == 0) {
          const int minimal = (s + node_size - 1) / node_size;
          for (int g = 0; g < ShapeLayout(w, s).replicate_degree(); ++g) {
            EXPECT_EQ(NodesSpanned(*plan, g), minimal) << g;
          }
        }
      }
    }
  }
}

TEST(Planner, UnequalNodesPackGroupsByBestFit) {
  // Nodes of 6, 2 and 4 free slots; W = 8, S = 4: one group fits the 4-node exactly, the other
  // the 6-node; nothing spans two nodes.
  const auto nodes = Nodes({6, 2, 4});
  auto plan = PlanPlacement(8, 4, nodes);
  ASSERT_TRUE(plan.ok()) << plan.status();
  CheckValid(*plan, 8, 4, nodes);
  EXPECT_EQ(NodesSpanned(*plan, 0), 1);
  EXPECT_EQ(NodesSpanned(*plan, 1), 1);
  EXPECT_EQ(plan->ranks[0].worker_id, "w2");  // best fit: the 4-slot node
  EXPECT_EQ(plan->ranks[4].worker_id, "w0");
}

TEST(Planner, GroupLargerThanAnyNodeTakesLargestNodesFirst) {
  const auto nodes = Nodes({3, 8, 5, 2});
  auto plan = PlanPlacement(16, 16, nodes);
  ASSERT_TRUE(plan.ok()) << plan.status();
  CheckValid(*plan, 16, 16, nodes);
  EXPECT_EQ(NodesSpanned(*plan, 0), 3);  // 8 + 5 + 3
  EXPECT_EQ(plan->ranks[0].worker_id, "w1");
  EXPECT_EQ(plan->ranks[0].local_world_size, 8);
}

TEST(Planner, UsesOnlyTheGivenFreeSlots) {
  auto nodes = Nodes({0});
  nodes[0].free_slots = {5, 2, 7};
  std::sort(nodes[0].free_slots.begin(), nodes[0].free_slots.end());
  auto plan = PlanPlacement(3, 3, nodes);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->ranks[0].slot_index, 2);
  EXPECT_EQ(plan->ranks[1].slot_index, 5);
  EXPECT_EQ(plan->ranks[2].slot_index, 7);
}

TEST(Planner, SixteenThousandRanksPlanQuickly) {
  // The coordinator plans under its lock: a 16384-rank world must not stall it.
  std::vector<int> sizes(2048, 8);
  const auto nodes = Nodes(sizes);
  for (int s : {1, 8, 16384}) {
    const absl::Time t0 = absl::Now();
    auto plan = PlanPlacement(16384, s, nodes);
    const absl::Duration took = absl::Now() - t0;
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_LT(took, absl::Seconds(1)) << "S=" << s;  // ~10 ms unloaded; generous for CI
    EXPECT_EQ(plan->ranks[16383].local_rank, 7);
  }
}

TEST(Planner, NotEnoughSlotsIsResourceExhausted) {
  auto plan = PlanPlacement(9, 3, Nodes({4, 4}));
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(plan.status().message().find("needs 9 slots, 8 free on 2 nodes"), std::string::npos)
      << plan.status();
}

TEST(Planner, ShardDegreeMustDivideWorld) {
  auto plan = PlanPlacement(6, 4, Nodes({8}));
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(plan.status().message().find("shard degree 4"), std::string::npos);
  EXPECT_EQ(PlanPlacement(0, 1, Nodes({8})).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(Planner, PlacesTheLayoutOfTheSpec) {
  JobSpec spec;
  spec.mutable_fsdp()->set_sharding_strategy(FsdpSpec::HYBRID_SHARD);
  spec.mutable_fsdp()->set_hybrid_shard_degree(4);
  auto layout = LayoutFor(spec, 8);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->shard_degree(), 4);
  const auto nodes = Nodes({6, 2, 4});
  auto plan = PlanPlacement(*layout, nodes);
  ASSERT_TRUE(plan.ok()) << plan.status();
  CheckValid(*plan, 8, 4, nodes);
  EXPECT_EQ(plan->shard_degree, 4);
  auto bad = LayoutFor(spec, 6);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "fsdp.hybrid_shard_degree: 4 does not divide world_size 6");
}

TEST(Planner, ShardDegreeFollowsStrategy) {
  JobSpec spec;
  spec.mutable_fsdp()->set_sharding_strategy(FsdpSpec::FULL_SHARD);
  EXPECT_EQ(*ShardDegreeFor(spec, 8), 8);
  spec.mutable_fsdp()->set_sharding_strategy(FsdpSpec::NO_SHARD);
  EXPECT_EQ(*ShardDegreeFor(spec, 8), 1);
  spec.mutable_fsdp()->set_hybrid_shard_degree(4);
  EXPECT_EQ(*ShardDegreeFor(spec, 8), 4);
  auto bad = ShardDegreeFor(spec, 6);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("fsdp.hybrid_shard_degree"), std::string::npos);
  spec.mutable_fsdp()->set_hybrid_shard_degree(1);
  EXPECT_EQ(ShardDegreeFor(spec, 8).status().code(), absl::StatusCode::kInvalidArgument);
  spec.mutable_fsdp()->set_hybrid_shard_degree(0);
  spec.mutable_fsdp()->set_sharding_strategy(FsdpSpec::HYBRID_SHARD);
  EXPECT_EQ(ShardDegreeFor(spec, 8).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(Planner, ElasticWorldSizeIsLargestValidSmallerWorld) {
  JobSpec spec;
  spec.set_world_size(8);
  spec.mutable_fsdp()->set_sharding_strategy(FsdpSpec::HYBRID_SHARD);
  spec.mutable_fsdp()->set_hybrid_shard_degree(2);
  EXPECT_EQ(ElasticWorldSize(spec, 10), 8);
  EXPECT_EQ(ElasticWorldSize(spec, 7), 0);  // min_world_size unset: no shrinking
  spec.mutable_elastic()->set_min_world_size(4);
  EXPECT_EQ(ElasticWorldSize(spec, 7), 6);  // 7 is not a multiple of S = 2
  EXPECT_EQ(ElasticWorldSize(spec, 4), 4);
  EXPECT_EQ(ElasticWorldSize(spec, 3), 0);
  // The global batch must split over micro batches of every rank.
  spec.mutable_train()->set_global_batch_size(16);
  spec.mutable_train()->set_micro_batch_size(2);
  EXPECT_EQ(ElasticWorldSize(spec, 7), 4);  // 6 * 2 does not divide 16
}

}  // namespace
}  // namespace shardline::coordinator
