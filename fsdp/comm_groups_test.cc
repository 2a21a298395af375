#include "fsdp/comm_groups.h"

#include <algorithm>
#include <thread>
#include <vector>

#include <ATen/ATen.h>

#include "fsdp/comm_args.h"
#include "fsdp/local_communicator.h"
#include "fsdp/no_op_communicator.h"
#include "fsdp/tcp_kv_store.h"
#include "gtest/gtest.h"

namespace shardline::fsdp {
namespace {

TEST(LocalCommunicator, CopiesForGatherAndScatterAndKeepsReduceAsIs) {
  LocalCommunicator comm("replicate[0]");
  EXPECT_EQ(comm.size(), 1);
  EXPECT_EQ(comm.rank(), 0);
  at::Tensor in = at::arange(6, at::kFloat);
  at::Tensor out = at::zeros({6}, at::kFloat);
  ASSERT_TRUE(comm.AllGather(in, out).ok());
  EXPECT_TRUE(out.equal(in));
  at::Tensor rs = at::zeros({6}, at::kFloat);
  ASSERT_TRUE(comm.ReduceScatterAsync(in, rs, ReduceOp::kAvg)->Wait().ok());
  EXPECT_TRUE(rs.equal(in));
  at::Tensor t = at::arange(3, at::kBFloat16);
  ASSERT_TRUE(comm.AllReduce(t, ReduceOp::kAvg).ok());
  EXPECT_TRUE(t.equal(at::arange(3, at::kBFloat16)));
  ASSERT_TRUE(comm.Broadcast(t, 0).ok());
  EXPECT_TRUE(comm.Barrier().ok());
  absl::Status s = comm.AllGather(in, at::zeros({5}, at::kFloat));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(s.message().rfind("group replicate[0] op all_gather: ", 0), 0u) << s;
  s = comm.Broadcast(t, 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
}

TEST(CreateCommGroups, RejectsBadShapesNamingValues) {
  TcpKvStore::Options o;
  o.serve = true;
  auto store = TcpKvStore::Create(o);
  ASSERT_TRUE(store.ok());
  // A shard degree that does not divide the world cannot become a ParallelLayout at all.
  auto bad_layout = ParallelLayout::Create(4, ShardingStrategy::kFullShard, 3);
  ASSERT_EQ(bad_layout.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad_layout.status().message(),
            "fsdp.hybrid_shard_degree: 3 does not divide world_size 4");
  const ParallelLayout layout = *ParallelLayout::Create(4, ShardingStrategy::kFullShard, 2);
  auto groups = CreateCommGroups(layout, 4, store->get(), {});
  ASSERT_EQ(groups.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(groups.status().message(), "rank 4 is outside world_size 4");
  groups = CreateCommGroups(layout, 0, nullptr, {});
  EXPECT_EQ(groups.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(CreateCommGroups, NcclWithoutTheBackendLinkedIsFailedPrecondition) {
  TcpKvStore::Options o;
  o.serve = true;
  auto store = TcpKvStore::Create(o);
  ASSERT_TRUE(store.ok());
  CommOptions options;
  options.backend = CommBackend::kNccl;
  auto groups = CreateCommGroups(ParallelLayout(), 0, store->get(), options);
  ASSERT_EQ(groups.status().code(), absl::StatusCode::kFailedPrecondition) << groups.status();
  EXPECT_NE(groups.status().message().find("nccl is not linked"), std::string::npos);
}

TEST(CreateCommGroups, RanksStartedWithDifferentLayoutsFailNamingBoth) {
  TcpKvStore::Options o;
  o.serve = true;
  auto store = TcpKvStore::Create(o);
  ASSERT_TRUE(store.ok());
  absl::Status status[2];
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      CommOptions options;
      options.timeout = absl::Seconds(10);
      // Rank 1 believes in S = 1.
      const ParallelLayout layout =
          *ParallelLayout::Create(2, rank == 0 ? "FULL_SHARD" : "NO_SHARD", 0);
      status[rank] = CreateCommGroups(layout, rank, store->get(), options).status();
    });
  }
  for (std::thread& t : threads) t.join();
  ASSERT_EQ(status[0].code(), absl::StatusCode::kInvalidArgument) << status[0];
  EXPECT_EQ(status[0].message(),
            "group world op connect step 0: rank 1 was started with world_size 2 shard_degree 1 "
            "backend gloo but rank 0 with "
            "world_size 2 shard_degree 2 backend gloo");
  ASSERT_EQ(status[1].code(), absl::StatusCode::kInvalidArgument) << status[1];
}

TEST(CreateCommGroups, MissingRankTimesOutNamingIt) {
  TcpKvStore::Options o;
  o.serve = true;
  auto store = TcpKvStore::Create(o);
  ASSERT_TRUE(store.ok());
  CommOptions options;
  options.timeout = absl::Milliseconds(300);
  auto groups =
      CreateCommGroups(*ParallelLayout::Create(2, "FULL_SHARD", 0), 0, store->get(), options);
  ASSERT_EQ(groups.status().code(), absl::StatusCode::kDeadlineExceeded) << groups.status();
  EXPECT_NE(groups.status().message().find("waiting for all 2 ranks to join"), std::string::npos)
      << groups.status();
  EXPECT_NE(groups.status().message().find("comm/layout/rank1"), std::string::npos)
      << groups.status();
}

// Gloo and NCCL timeout / lost-peer messages name the group this way.
TEST(DescribeGroupMembers, GlobalRanksWhenKnownElseThePositionInTheGroup) {
  EXPECT_EQ(DescribeGroupMembers({2, 6}, 1, 2), "(group ranks [2, 6], this is rank 6)");
  EXPECT_EQ(DescribeGroupMembers({}, 1, 2), "(this is rank 1 of 2 in the group)");
  EXPECT_EQ(DescribeGroupMembers({0, 1, 2}, 0, 2), "(this is rank 0 of 2 in the group)");
}

TEST(ParseCommBackend, KnownAndUnknownNames) {
  EXPECT_EQ(*ParseCommBackend("gloo"), CommBackend::kGloo);
  EXPECT_EQ(*ParseCommBackend("nccl"), CommBackend::kNccl);
  auto bad = ParseCommBackend("mpi");
  ASSERT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "comm backend: unknown backend \"mpi\"; valid: gloo, nccl");
}

// W = 4, S = 2 in threads: names, sizes and one all-reduce per group.
TEST(CreateCommGroups, BuildsNamedGroupsOfTheLayout) {
  TcpKvStore::Options o;
  o.serve = true;
  auto store = TcpKvStore::Create(o);
  ASSERT_TRUE(store.ok());
  constexpr int kWorld = 4, kShard = 2;
  const ParallelLayout layout = *ParallelLayout::Create(kWorld, "HYBRID_SHARD", kShard);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < kWorld; ++rank) {
    threads.emplace_back([&, rank] {
      CommOptions options;
      options.timeout = absl::Seconds(20);
      auto groups = CreateCommGroups(layout, rank, store->get(), options);
      ASSERT_TRUE(groups.ok()) << groups.status();
      EXPECT_EQ(groups->world->name(), "world");
      EXPECT_EQ(groups->shard->name(),
                "shard[" + std::to_string(layout.ReplicateIndex(rank)) + "]");
      EXPECT_EQ(groups->replicate->name(),
                "replicate[" + std::to_string(layout.ShardIndex(rank)) + "]");
      EXPECT_EQ(groups->shard->rank(), layout.ShardIndex(rank));
      EXPECT_EQ(groups->replicate->rank(), layout.ReplicateIndex(rank));
      at::Tensor t = at::full({2}, static_cast<double>(rank), at::kFloat);
      ASSERT_TRUE(groups->shard->AllReduce(t, ReduceOp::kSum).ok());
      // shard[0] = {0, 1} -> 1, shard[1] = {2, 3} -> 5.
      EXPECT_EQ(t[0].item<float>(), layout.ReplicateIndex(rank) == 0 ? 1.0f : 5.0f);
      at::Tensor u = at::full({2}, static_cast<double>(rank), at::kFloat);
      ASSERT_TRUE(groups->replicate->AllReduce(u, ReduceOp::kSum).ok());
      // replicate[0] = {0, 2} -> 2, replicate[1] = {1, 3} -> 4.
      EXPECT_EQ(u[0].item<float>(), layout.ShardIndex(rank) == 0 ? 2.0f : 4.0f);
    });
  }
  for (std::thread& t : threads) t.join();
}

TEST(CreateMemberCommGroups, BuildsTheGroupsOfTheLiveReplicaGroupsOnly) {
  TcpKvStore::Options o;
  o.serve = true;
  auto store = TcpKvStore::Create(o);
  ASSERT_TRUE(store.ok());
  // W = 6, S = 2: replica groups {0, 1}, {2, 3}, {4, 5}; group 1 is lost.
  constexpr int kWorld = 6, kShard = 2;
  const std::vector<int> live = {0, 2};
  const std::vector<int> members = {0, 1, 4, 5};
  const ParallelLayout layout = *ParallelLayout::Create(kWorld, "HYBRID_SHARD", kShard);
  std::vector<std::thread> threads;
  for (int rank : members) {
    threads.emplace_back([&, rank] {
      CommOptions options;
      options.timeout = absl::Seconds(20);
      options.key_prefix = "comm/job/1/ft/e1";
      auto groups = CreateMemberCommGroups(layout, rank, live, store->get(), options);
      ASSERT_TRUE(groups.ok()) << groups.status();
      const int position = rank < 2 ? 0 : 1;  // Of this rank's group among the live ones.
      EXPECT_EQ(groups->world->size(), 4);
      EXPECT_EQ(groups->world->rank(),
                std::find(members.begin(), members.end(), rank) - members.begin());
      EXPECT_EQ(groups->shard->name(),
                "shard[" + std::to_string(layout.ReplicateIndex(rank)) + "]");
      EXPECT_EQ(groups->shard->rank(), layout.ShardIndex(rank));
      EXPECT_EQ(groups->replicate->name(),
                "replicate[" + std::to_string(layout.ShardIndex(rank)) + "]");
      EXPECT_EQ(groups->replicate->size(), 2);
      EXPECT_EQ(groups->replicate->rank(), position);
      at::Tensor w = at::full({1}, static_cast<double>(rank), at::kFloat);
      ASSERT_TRUE(groups->world->AllReduce(w, ReduceOp::kSum).ok());
      EXPECT_EQ(w[0].item<float>(), 10.0f);  // 0 + 1 + 4 + 5.
      at::Tensor r = at::full({1}, static_cast<double>(rank), at::kFloat);
      ASSERT_TRUE(groups->replicate->AllReduce(r, ReduceOp::kAvg).ok());
      // replicate[0] = {0, 4} -> 2, replicate[1] = {1, 5} -> 3.
      EXPECT_EQ(r[0].item<float>(), layout.ShardIndex(rank) == 0 ? 2.0f : 3.0f);
    });
  }
  for (std::thread& t : threads) t.join();
}

TEST(CreateMemberCommGroups, RefusesARankOutsideTheLiveGroupsAndUnorderedGroups) {
  TcpKvStore::Options o;
  o.serve = true;
  auto store = TcpKvStore::Create(o);
  ASSERT_TRUE(store.ok());
  const ParallelLayout layout = *ParallelLayout::Create(6, "HYBRID_SHARD", 2);
  auto groups = CreateMemberCommGroups(layout, 2, {0, 2}, store->get(), {});
  ASSERT_EQ(groups.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(groups.status().message(), "rank 2's replica group 1 is not among the live groups");
  groups = CreateMemberCommGroups(layout, 0, {2, 0}, store->get(), {});
  ASSERT_EQ(groups.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(groups.status().message(),
            "live replica groups must ascend within [0, 3); got group 0");
  groups = CreateMemberCommGroups(layout, 0, {0, 3}, store->get(), {});
  EXPECT_EQ(groups.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(NoOpCommunicator, SameShapesNoCommunicationCountsCalls) {
  NoOpCommunicator comm("shard[0]", 1, 4, at::kCPU);
  EXPECT_EQ(comm.rank(), 1);
  EXPECT_EQ(comm.size(), 4);
  EXPECT_EQ(comm.name(), "shard[0]");
  // All-gather: every chunk is this rank's input (as PyTorch's fake all-gather).
  at::Tensor in = at::arange(3, at::kFloat) + 1;
  at::Tensor out = at::zeros({12}, at::kFloat);
  ASSERT_TRUE(comm.AllGather(in, out).ok());
  EXPECT_TRUE(out.equal(in.repeat({4})));
  at::Tensor bf_in = at::arange(2, at::kBFloat16);
  at::Tensor bf_out = at::zeros({8}, at::kBFloat16);
  ASSERT_TRUE(comm.AllGatherAsync(bf_in, bf_out)->Wait().ok());
  EXPECT_TRUE(bf_out.equal(bf_in.repeat({4})));
  // Reduce-scatter: out is this rank's chunk of the input, unreduced.
  at::Tensor rs_in = at::arange(8, at::kFloat);
  at::Tensor rs_out = at::zeros({2}, at::kFloat);
  ASSERT_TRUE(comm.ReduceScatterAsync(rs_in, rs_out, ReduceOp::kAvg)->Wait().ok());
  EXPECT_TRUE(rs_out.equal(at::arange(2, 4, at::kFloat)));
  // All-reduce and broadcast leave the tensor as it is.
  at::Tensor t = at::arange(5, at::kFloat);
  ASSERT_TRUE(comm.AllReduce(t, ReduceOp::kSum).ok());
  ASSERT_TRUE(comm.AllReduceAsync(t, ReduceOp::kAvg)->Wait().ok());
  ASSERT_TRUE(comm.Broadcast(t, 3).ok());
  EXPECT_TRUE(t.equal(at::arange(5, at::kFloat)));
  ASSERT_TRUE(comm.Barrier().ok());
  // Wrong shapes are refused with the real backends' messages, and not counted.
  absl::Status s = comm.AllGather(in, at::zeros({11}, at::kFloat));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(s.message().rfind("group shard[0] op all_gather: ", 0), 0u) << s;
  s = comm.ReduceScatter(rs_in, at::zeros({3}, at::kFloat), ReduceOp::kSum);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  s = comm.Broadcast(t, 4);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  NoOpCommCounts c = comm.counts();
  EXPECT_EQ(c.all_gathers, 2);
  EXPECT_EQ(c.all_gather_bytes, 12 * 4 + 8 * 2);
  EXPECT_EQ(c.reduce_scatters, 1);
  EXPECT_EQ(c.reduce_scatter_bytes, 8 * 4);
  EXPECT_EQ(c.all_reduces, 2);
  EXPECT_EQ(c.all_reduce_bytes, 2 * 5 * 4);
  EXPECT_EQ(c.broadcasts, 1);
  EXPECT_EQ(c.barriers, 1);
}

TEST(NoOpCommunicator, CudaGroupRefusesCpuTensors) {
  NoOpCommunicator comm("shard[0]", 0, 2, at::kCUDA);
  absl::Status s = comm.AllGather(at::zeros({2}), at::zeros({4}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(comm.counts().all_gathers, 0);
}

// W = 4, S = 2 with fake collectives: shard and replicate groups are fakes, the world is real.
TEST(CreateCommGroups, FakeCollectivesReplaceShardAndReplicateOnly) {
  TcpKvStore::Options o;
  o.serve = true;
  auto store = TcpKvStore::Create(o);
  ASSERT_TRUE(store.ok());
  constexpr int kWorld = 4, kShard = 2;
  const ParallelLayout layout = *ParallelLayout::Create(kWorld, "HYBRID_SHARD", kShard);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < kWorld; ++rank) {
    threads.emplace_back([&, rank] {
      CommOptions options;
      options.timeout = absl::Seconds(20);
      options.fake_collectives = true;
      auto groups = CreateCommGroups(layout, rank, store->get(), options);
      ASSERT_TRUE(groups.ok()) << groups.status();
      auto* shard = dynamic_cast<NoOpCommunicator*>(groups->shard.get());
      auto* replicate = dynamic_cast<NoOpCommunicator*>(groups->replicate.get());
      ASSERT_NE(shard, nullptr);
      ASSERT_NE(replicate, nullptr);
      EXPECT_EQ(dynamic_cast<NoOpCommunicator*>(groups->world.get()), nullptr);
      EXPECT_EQ(shard->name(), "shard[" + std::to_string(layout.ReplicateIndex(rank)) + "]");
      EXPECT_EQ(shard->rank(), layout.ShardIndex(rank));
      EXPECT_EQ(replicate->rank(), layout.ReplicateIndex(rank));
      at::Tensor t = at::full({2}, static_cast<double>(rank), at::kFloat);
      ASSERT_TRUE(groups->shard->AllReduce(t, ReduceOp::kSum).ok());
      EXPECT_EQ(t[0].item<float>(), static_cast<float>(rank));  // Not reduced.
      EXPECT_EQ(shard->counts().all_reduces, 1);
      at::Tensor w = at::full({2}, static_cast<double>(rank), at::kFloat);
      ASSERT_TRUE(groups->world->AllReduce(w, ReduceOp::kSum).ok());
      EXPECT_EQ(w[0].item<float>(), 6.0f);  // 0 + 1 + 2 + 3: really reduced.
    });
  }
  for (std::thread& t : threads) t.join();
}

TEST(CreateCommGroups, RanksDisagreeingOnFakeCollectivesFail) {
  TcpKvStore::Options o;
  o.serve = true;
  auto store = TcpKvStore::Create(o);
  ASSERT_TRUE(store.ok());
  absl::Status status[2];
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      CommOptions options;
      options.timeout = absl::Seconds(10);
      options.fake_collectives = rank == 1;
      status[rank] =
          CreateCommGroups(*ParallelLayout::Create(2, "FULL_SHARD", 0), rank, store->get(), options)
              .status();
    });
  }
  for (std::thread& t : threads) t.join();
  ASSERT_EQ(status[0].code(), absl::StatusCode::kInvalidArgument) << status[0];
  EXPECT_NE(status[0].message().find("backend gloo fake_collectives but rank 0 with"),
            std::string::npos)
      << status[0];
}

}  // namespace
}  // namespace shardline::fsdp
