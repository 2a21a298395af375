// GlooCommunicator with every rank as a thread of this process (real TCP pairs on loopback).
// The multi-process tests (multi_process_comm_test) cover the same collectives across
// processes and peer death.
#include "fsdp/gloo_communicator.h"

#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <ATen/ATen.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "fsdp/prefix_kv_store.h"
#include "fsdp/tcp_kv_store.h"
#include "gtest/gtest.h"

namespace shardline::fsdp {
namespace {

using RankFn = std::function<void(GlooCommunicator& comm)>;

// Runs `fn` on `world` ranks, each a thread with its own communicator; failures inside `fn`
// are reported by gtest with the rank in the trace.
void RunGroup(int world, const RankFn& fn, absl::Duration timeout = absl::Seconds(20),
              const std::vector<int>& global_ranks = {}, int reduce_scatter_cache_entries = 2) {
  static int generation = 0;
  const std::string prefix = absl::StrCat("test", generation++);
  TcpKvStore::Options server_options;
  server_options.serve = true;
  auto server = TcpKvStore::Create(server_options);
  ASSERT_TRUE(server.ok()) << server.status();
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      SCOPED_TRACE(absl::StrCat("rank ", r, " of ", world));
      PrefixKvStore store(server->get(), prefix);
      GlooCommunicator::Options options;
      options.name = "test";
      options.rank = r;
      options.size = world;
      options.store = &store;
      options.timeout = timeout;
      options.global_ranks = global_ranks;
      options.reduce_scatter_cache_entries = reduce_scatter_cache_entries;
      auto comm = GlooCommunicator::Create(options);
      ASSERT_TRUE(comm.ok()) << comm.status();
      fn(**comm);
    });
  }
  for (std::thread& t : threads) t.join();
}

// Rank r's input: r * 1000 + i.
at::Tensor RankInput(int rank, int64_t n, at::ScalarType dtype) {
  return (at::arange(n, at::kDouble) + 1000.0 * rank).to(dtype);
}

class GlooCollectives : public ::testing::TestWithParam<int> {};

TEST_P(GlooCollectives, AllGatherConcatenatesInRankOrder) {
  const int world = GetParam();
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    RunGroup(world, [&](GlooCommunicator& comm) {
      const int64_t n = 5;
      at::Tensor in = RankInput(comm.rank(), n, dtype);
      at::Tensor out = at::zeros({n * world}, dtype);
      ASSERT_TRUE(comm.AllGather(in, out).ok());
      for (int r = 0; r < world; ++r) {
        EXPECT_TRUE(out.narrow(0, r * n, n).equal(RankInput(r, n, dtype))) << "chunk " << r;
      }
    });
  }
}

TEST_P(GlooCollectives, AllGatherInPlaceFromOwnSlot) {
  const int world = GetParam();
  RunGroup(world, [&](GlooCommunicator& comm) {
    const int64_t n = 3;
    at::Tensor out = at::zeros({n * world}, at::kFloat);
    at::Tensor mine = out.narrow(0, comm.rank() * n, n);
    mine.copy_(RankInput(comm.rank(), n, at::kFloat));
    ASSERT_TRUE(comm.AllGather(mine, out).ok());
    for (int r = 0; r < world; ++r) {
      EXPECT_TRUE(out.narrow(0, r * n, n).equal(RankInput(r, n, at::kFloat)));
    }
  });
}

TEST_P(GlooCollectives, ReduceScatterSumAndAverageForManySizes) {
  const int world = GetParam();
  RunGroup(world, [&](GlooCommunicator& comm) {
    for (int64_t chunk : {1, 2, 7, 1000}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
        for (at::ScalarType dtype : {at::kFloat, at::kDouble, at::kBFloat16}) {
          SCOPED_TRACE(absl::StrCat("chunk ", chunk, " avg ", op == ReduceOp::kAvg, " dtype ",
                                    std::string(c10::toString(dtype))));
          at::Tensor in = RankInput(comm.rank(), chunk * world, dtype);
          const at::Tensor in_before = in.clone();
          at::Tensor out = at::zeros({chunk}, dtype);
          absl::Status status = comm.ReduceScatter(in, out, op);
          ASSERT_TRUE(status.ok()) << status;
          // sum_r (1000 r + rank*chunk + j) = 1000 W(W-1)/2 + W (rank*chunk + j)
          at::Tensor expected = (at::arange(chunk, at::kDouble) + comm.rank() * chunk) * world +
                                1000.0 * world * (world - 1) / 2;
          if (op == ReduceOp::kAvg) expected = expected / world;
          const double tol = dtype == at::kBFloat16 ? 0.01 : 1e-6;
          EXPECT_TRUE(out.to(at::kDouble).allclose(expected, tol, tol))
              << out.to(at::kDouble) << expected;
          EXPECT_TRUE(in.equal(in_before)) << "input was modified";
        }
      }
    }
  });
}

TEST_P(GlooCollectives, AllReduceEveryDtype) {
  const int world = GetParam();
  RunGroup(world, [&](GlooCommunicator& comm) {
    for (at::ScalarType dtype : {at::kFloat, at::kDouble, at::kLong, at::kBFloat16, at::kHalf}) {
      SCOPED_TRACE(std::string(c10::toString(dtype)));
      at::Tensor t = RankInput(comm.rank(), 11, dtype);
      ASSERT_TRUE(comm.AllReduce(t, ReduceOp::kSum).ok());
      at::Tensor expected = at::arange(11, at::kDouble) * world + 1000.0 * world * (world - 1) / 2;
      EXPECT_TRUE(t.to(at::kDouble).allclose(expected, 0.01, 0)) << t;
      if (dtype == at::kLong) continue;
      at::Tensor avg = RankInput(comm.rank(), 11, dtype);
      ASSERT_TRUE(comm.AllReduce(avg, ReduceOp::kAvg).ok());
      EXPECT_TRUE(avg.to(at::kDouble).allclose(expected / world, 0.01, 0)) << avg;
    }
  });
}

TEST_P(GlooCollectives, BroadcastFromEveryRoot) {
  const int world = GetParam();
  RunGroup(world, [&](GlooCommunicator& comm) {
    for (int root = 0; root < world; ++root) {
      at::Tensor t = RankInput(comm.rank(), 9, at::kBFloat16);
      ASSERT_TRUE(comm.Broadcast(t, root).ok());
      EXPECT_TRUE(t.equal(RankInput(root, 9, at::kBFloat16))) << "root " << root;
    }
    EXPECT_TRUE(comm.Barrier().ok());
  });
}

TEST_P(GlooCollectives, AsyncOpsCompleteInIssueOrder) {
  const int world = GetParam();
  RunGroup(world, [&](GlooCommunicator& comm) {
    std::vector<at::Tensor> tensors;
    std::vector<std::unique_ptr<CommHandle>> handles;
    for (int i = 0; i < 8; ++i) {
      tensors.push_back(at::full({4}, static_cast<double>(i + comm.rank()), at::kFloat));
      handles.push_back(comm.AllReduceAsync(tensors.back(), ReduceOp::kSum));
    }
    at::Tensor gathered = at::zeros({3 * world}, at::kFloat);
    at::Tensor mine = RankInput(comm.rank(), 3, at::kFloat);
    auto gather = comm.AllGatherAsync(mine, gathered);
    for (int i = 7; i >= 0; --i) {  // Waiting out of order is fine.
      ASSERT_TRUE(handles[i]->Wait().ok());
      EXPECT_TRUE(handles[i]->Wait().ok());  // Twice: same status.
      const double expected = world * i + world * (world - 1) / 2.0;
      EXPECT_TRUE(tensors[i].equal(at::full({4}, expected, at::kFloat))) << tensors[i];
    }
    ASSERT_TRUE(gather->Wait().ok());
    EXPECT_TRUE(gathered.narrow(0, 0, 3).equal(RankInput(0, 3, at::kFloat)));
  });
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, GlooCollectives, ::testing::Values(1, 2, 3, 4, 5));

// Halving-doubling splits a non-power-of-two group into binary blocks (6 = 4 + 2, 7 = 4 + 2 + 1)
// with extra sends between them; check those sizes (and 8) for the reduce-scatter alone, with
// chunks smaller than the number of ranks too, and back-to-back calls without a barrier.
class GlooReduceScatterLarge : public ::testing::TestWithParam<int> {};

TEST_P(GlooReduceScatterLarge, SumMatchesForOddBlockLayouts) {
  const int world = GetParam();
  RunGroup(world, [&](GlooCommunicator& comm) {
    for (int64_t chunk : {1, 3, 13, 4097}) {
      SCOPED_TRACE(absl::StrCat("chunk ", chunk));
      at::Tensor in = RankInput(comm.rank(), chunk * world, at::kFloat);
      at::Tensor out = at::zeros({chunk}, at::kFloat);
      absl::Status status = comm.ReduceScatter(in, out, ReduceOp::kSum);
      ASSERT_TRUE(status.ok()) << status;
      at::Tensor expected = (at::arange(chunk, at::kDouble) + comm.rank() * chunk) * world +
                            1000.0 * world * (world - 1) / 2;
      EXPECT_TRUE(out.to(at::kDouble).allclose(expected, 1e-6, 1e-6));
    }
  });
}

// Reduce-scatter instances are reused across calls of the same size: every call must see only
// its own inputs, back to back, for power-of-two and other group sizes alike.
TEST_P(GlooReduceScatterLarge, RepeatedCallsOfOneSizeSeeOnlyTheirOwnInputs) {
  const int world = GetParam();
  RunGroup(world, [&](GlooCommunicator& comm) {
    constexpr int64_t kChunk = 3001;
    at::Tensor out = at::zeros({kChunk}, at::kFloat);
    for (int call = 0; call < 12; ++call) {
      SCOPED_TRACE(absl::StrCat("call ", call));
      at::Tensor in = RankInput(comm.rank(), kChunk * world, at::kFloat) + 100000.0 * call;
      absl::Status status = comm.ReduceScatter(in, out, ReduceOp::kSum);
      ASSERT_TRUE(status.ok()) << status;
      at::Tensor expected = (at::arange(kChunk, at::kDouble) + comm.rank() * kChunk) * world +
                            1000.0 * world * (world - 1) / 2 + 100000.0 * call * world;
      ASSERT_TRUE(out.to(at::kDouble).allclose(expected, 1e-6, 1e-6));
    }
  });
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, GlooReduceScatterLarge, ::testing::Values(3, 4, 5, 6, 7, 8));

// Rank r's input for the bit-exactness tests: values whose sums round (unlike RankInput's).
at::Tensor RandomRankInput(int rank, int call, int64_t n, at::ScalarType dtype) {
  at::Generator gen = at::detail::createCPUGenerator(1000 * call + rank);
  return at::randn({n}, gen, at::TensorOptions().dtype(at::kDouble)).mul_(1e3).to(dtype);
}

// Gloo's halving-doubling order of additions in a power-of-two group: ranks paired by the
// lowest bit first, then pairs of pairs, ((in0 + in1) + (in2 + in3)) for four ranks, in the
// summing dtype (fp32 for fp32/bf16, fp64 for fp64).
at::Tensor TreeSum(int world, int call, int64_t n, at::ScalarType dtype) {
  const at::ScalarType wide = dtype == at::kDouble ? at::kDouble : at::kFloat;
  std::vector<at::Tensor> level;
  for (int r = 0; r < world; ++r) level.push_back(RandomRankInput(r, call, n, dtype).to(wide));
  while (level.size() > 1) {
    std::vector<at::Tensor> next;
    for (size_t i = 0; i < level.size(); i += 2) next.push_back(level[i] + level[i + 1]);
    level = std::move(next);
  }
  return level[0];
}

// ReduceScatterConsuming reduces in the caller's input (power-of-two groups) where
// ReduceScatter reduces a copy: both must give exactly the sums of Gloo's algorithm, bit for
// bit (FSDP's parity tests rely on it), across dtypes, ops, sizes that grow and shrink between
// calls (the kept buffers), and back-to-back calls.
class GlooReduceScatterExact : public ::testing::TestWithParam<int> {};

TEST_P(GlooReduceScatterExact, BothFormsGiveGloosSumsBitForBit) {
  const int world = GetParam();
  RunGroup(world, [&](GlooCommunicator& comm) {
    int call = 0;
    for (int64_t chunk : {1, 5, 4099, 2, 70001}) {
      for (at::ScalarType dtype : {at::kFloat, at::kDouble, at::kBFloat16}) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
          ++call;
          SCOPED_TRACE(absl::StrCat("chunk ", chunk, " dtype ", std::string(c10::toString(dtype)),
                                    " avg ", op == ReduceOp::kAvg));
          const at::Tensor in = RandomRankInput(comm.rank(), call, chunk * world, dtype);
          at::Tensor kept = at::empty({chunk}, dtype);
          absl::Status status = comm.ReduceScatter(in, kept, op);
          ASSERT_TRUE(status.ok()) << status;
          at::Tensor scratch = in.clone();
          at::Tensor consumed = at::empty({chunk}, dtype);
          status = comm.ReduceScatterConsuming(scratch, consumed, op);
          ASSERT_TRUE(status.ok()) << status;
          EXPECT_TRUE(kept.equal(consumed));
          if ((world & (world - 1)) == 0) {
            at::Tensor expected =
                TreeSum(world, call, chunk * world, dtype).narrow(0, comm.rank() * chunk, chunk);
            if (op == ReduceOp::kAvg) expected.div_(world);
            EXPECT_TRUE(kept.equal(expected.to(dtype)))
                << "max diff " << (kept.to(at::kDouble) - expected.to(at::kDouble)).abs().max();
          }
        }
      }
    }
    // Async, several in flight, each consuming its own input.
    std::vector<at::Tensor> ins, outs;
    std::vector<std::unique_ptr<CommHandle>> handles;
    for (int i = 0; i < 4; ++i) {
      ins.push_back(RandomRankInput(comm.rank(), 100 + i, 333 * world, at::kFloat));
      outs.push_back(at::empty({333}, at::kFloat));
      handles.push_back(comm.ReduceScatterConsumingAsync(ins.back(), outs.back(), ReduceOp::kAvg));
    }
    for (int i = 0; i < 4; ++i) {
      ASSERT_TRUE(handles[i]->Wait().ok());
      at::Tensor in = RandomRankInput(comm.rank(), 100 + i, 333 * world, at::kFloat);
      at::Tensor expected = at::empty({333}, at::kFloat);
      ASSERT_TRUE(comm.ReduceScatter(in, expected, ReduceOp::kAvg).ok());
      EXPECT_TRUE(outs[i].equal(expected)) << "async call " << i;
    }
  });
}

// reduce_scatter_cache_entries = 0: every call builds (and drops) its instance, with the same
// sums as the cached ones.
TEST_P(GlooReduceScatterExact, WithoutACacheEveryCallBuildsItsOwnInstance) {
  const int world = GetParam();
  RunGroup(
      world,
      [&](GlooCommunicator& comm) {
        int call = 200;
        for (int64_t chunk : {3, 1001, 3, 17}) {
          ++call;
          SCOPED_TRACE(absl::StrCat("chunk ", chunk));
          at::Tensor in = RandomRankInput(comm.rank(), call, chunk * world, at::kFloat);
          at::Tensor out = at::empty({chunk}, at::kFloat);
          ASSERT_TRUE(comm.ReduceScatterConsuming(in, out, ReduceOp::kSum).ok());
          at::Tensor expected = RandomRankInput(0, call, chunk * world, at::kDouble);
          for (int r = 1; r < world; ++r) {
            expected += RandomRankInput(r, call, chunk * world, at::kDouble);
          }
          expected = expected.narrow(0, comm.rank() * chunk, chunk);
          EXPECT_TRUE(out.to(at::kDouble).allclose(expected, 1e-5, 1e-3));
          if ((world & (world - 1)) == 0) {
            EXPECT_TRUE(out.equal(TreeSum(world, call, chunk * world, at::kFloat)
                                      .narrow(0, comm.rank() * chunk, chunk)));
          }
        }
      },
      absl::Seconds(20), {}, /*reduce_scatter_cache_entries=*/0);
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, GlooReduceScatterExact, ::testing::Values(1, 2, 3, 4, 8));

// Bytes this process has written with write-family calls (Gloo's TCP pairs use writev).
int64_t ProcessWriteBytes() {
  std::ifstream io("/proc/self/io");
  std::string key;
  int64_t value = 0;
  while (io >> key >> value) {
    if (key == "wchar:") return value;
  }
  return -1;
}

// The point of using Gloo's reduce-scatter rather than all-reduce + slice: it sends about half
// the bytes. All ranks are threads of this process, so /proc/self/io counts their traffic.
TEST(GlooCommunicator, ReduceScatterSendsAboutHalfTheBytesOfAllReduce) {
  constexpr int kWorld = 4;
  constexpr int64_t kNumel = 1 << 20;  // 4 MiB of fp32 per rank.
  int64_t before = 0, after_all_reduce = 0, after_reduce_scatter = 0;
  RunGroup(kWorld, [&](GlooCommunicator& comm) {
    at::Tensor t = RankInput(comm.rank(), kNumel, at::kFloat);
    at::Tensor out = at::zeros({kNumel / kWorld}, at::kFloat);
    ASSERT_TRUE(comm.Barrier().ok());
    if (comm.rank() == 0) before = ProcessWriteBytes();
    ASSERT_TRUE(comm.Barrier().ok());
    ASSERT_TRUE(comm.AllReduce(t, ReduceOp::kSum).ok());
    ASSERT_TRUE(comm.Barrier().ok());
    if (comm.rank() == 0) after_all_reduce = ProcessWriteBytes();
    ASSERT_TRUE(comm.Barrier().ok());
    ASSERT_TRUE(comm.ReduceScatter(t, out, ReduceOp::kSum).ok());
    ASSERT_TRUE(comm.Barrier().ok());
    if (comm.rank() == 0) after_reduce_scatter = ProcessWriteBytes();
    ASSERT_TRUE(comm.Barrier().ok());
  });
  ASSERT_GE(before, 0) << "no wchar in /proc/self/io";
  const double all_reduce = after_all_reduce - before;
  const double reduce_scatter = after_reduce_scatter - after_all_reduce;
  const double bytes = kNumel * 4.0;
  std::cerr << "all_reduce wrote " << all_reduce / bytes << " x buffer, reduce_scatter "
            << reduce_scatter / bytes << " x buffer (over " << kWorld << " ranks)\n";
  // Ring all-reduce: 2 (W-1)/W per rank = 6 buffers over 4 ranks. Halving-doubling
  // reduce-scatter: (W-1)/W per rank plus a bit-reversal exchange of 1/W on half of the ranks
  // = 3.5 buffers.
  EXPECT_GT(all_reduce, 5.5 * bytes);
  EXPECT_GT(reduce_scatter, 2.9 * bytes);
  EXPECT_LT(reduce_scatter, 0.65 * all_reduce);
}

TEST(GlooCommunicator, RejectsBadArgumentsWithoutBreaking) {
  RunGroup(2, [&](GlooCommunicator& comm) {
    at::Tensor in = at::zeros({4}, at::kFloat);
    absl::Status s = comm.AllGather(in, at::zeros({7}, at::kFloat));
    ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_EQ(s.message(),
              "group test op all_gather: output Float[7] on cpu must hold 2 x input Float[4] on "
              "cpu");
    s = comm.ReduceScatter(in, at::zeros({2}, at::kDouble), ReduceOp::kSum);
    ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    s = comm.Broadcast(in, 2);
    ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("root 2 is outside the group of 2"), std::string::npos) << s;
    s = comm.AllReduce(at::zeros({2}, at::kLong), ReduceOp::kAvg);
    ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    // Still usable.
    at::Tensor t = at::ones({3}, at::kFloat);
    ASSERT_TRUE(comm.AllReduce(t, ReduceOp::kSum).ok());
    EXPECT_TRUE(t.equal(at::full({3}, 2.0, at::kFloat)));
  });
}

TEST(GlooCommunicator, StalledPeerTimesOutNamingGroupOpAndStepThenStaysBroken) {
  absl::Mutex mu;
  bool rank0_done = false;
  RunGroup(2,
           [&](GlooCommunicator& comm) {
             comm.set_step(17);
             if (comm.rank() == 1) {
               // Never joins the all-reduce; waits until rank 0 gave up, then leaves.
               absl::MutexLock lock(&mu);
               mu.Await(absl::Condition(&rank0_done));
               return;
             }
             at::Tensor t = at::ones({1000}, at::kFloat);
             const absl::Time start = absl::Now();
             absl::Status s = comm.AllReduce(t, ReduceOp::kSum);
             const absl::Duration took = absl::Now() - start;
             EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
             EXPECT_EQ(s.message().rfind("group test op all_reduce step 17: timed out after 1s "
                                         "(group ranks [1, 3], this is rank 1): ",
                                         0),
                       0u)
                 << s;
             EXPECT_GE(took, absl::Milliseconds(900));
             EXPECT_LT(took, absl::Seconds(10));
             absl::Status later = comm.Barrier();
             EXPECT_EQ(later.code(), absl::StatusCode::kFailedPrecondition) << later;
             EXPECT_EQ(
                 later.message().rfind("group test op barrier step 17: communicator is broken", 0),
                 0u)
                 << later;
             absl::MutexLock lock(&mu);
             rank0_done = true;
           },
           absl::Seconds(1), /*global_ranks=*/{1, 3});
}

// Abandon (replica-group fault tolerance giving a group up after a failure elsewhere): the
// abandoned communicator refuses collectives, and its teardown skips the closing barrier, so
// peers blocked in a collective with it fail at once with "lost a peer". A graceful teardown
// would first wait out the barrier's 2 s for peers that are busy in that collective.
TEST(GlooCommunicator, AbandonedCommunicatorClosesAtOnceAndPeersFailFast) {
  RunGroup(3, [&](GlooCommunicator& comm) {
    comm.set_step(5);
    if (comm.rank() == 0) {
      absl::SleepFor(absl::Milliseconds(300));  // The others are in the all-reduce by now.
      comm.Abandon();
      at::Tensor t = at::ones({8}, at::kFloat);
      absl::Status s = comm.AllReduce(t, ReduceOp::kSum);
      EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
      EXPECT_TRUE(absl::StrContains(s.message(), "abandoned by this rank")) << s;
      return;  // The communicator is destroyed now.
    }
    at::Tensor t = at::ones({1 << 16}, at::kFloat);
    const absl::Time start = absl::Now();
    absl::Status s = comm.AllReduce(t, ReduceOp::kSum);
    const absl::Duration took = absl::Now() - start;
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "lost a peer")) << s;
    EXPECT_LT(took, absl::Milliseconds(1500)) << "waited for rank 0's closing barrier";
  });
}

TEST(GlooCommunicator, StalledPeerTimeoutNamesGroupRankWithoutGlobalRanks) {
  absl::Mutex mu;
  bool rank1_done = false;
  RunGroup(
      2,
      [&](GlooCommunicator& comm) {
        if (comm.rank() == 0) {
          absl::MutexLock lock(&mu);
          mu.Await(absl::Condition(&rank1_done));
          return;
        }
        absl::Status s = comm.Barrier();
        EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
        EXPECT_EQ(s.message().rfind("group test op barrier step 0: timed out after 500ms "
                                    "(this is rank 1 of 2 in the group): ",
                                    0),
                  0u)
            << s;
        absl::MutexLock lock(&mu);
        rank1_done = true;
      },
      absl::Milliseconds(500));
}

TEST(GlooCommunicator, RefusesGlobalRanksOfAnotherSize) {
  TcpKvStore::Options server_options;
  server_options.serve = true;
  auto server = TcpKvStore::Create(server_options);
  ASSERT_TRUE(server.ok());
  GlooCommunicator::Options options;
  options.name = "shard[0]";
  options.size = 2;
  options.global_ranks = {0, 1, 2};
  options.store = server->get();
  auto comm = GlooCommunicator::Create(options);
  ASSERT_EQ(comm.status().code(), absl::StatusCode::kInvalidArgument) << comm.status();
  EXPECT_EQ(comm.status().message(), "group shard[0]: 3 global ranks for a group of size 2");
}

TEST(GlooCommunicator, BootstrapTimesOutWhenPeersNeverArrive) {
  TcpKvStore::Options server_options;
  server_options.serve = true;
  auto server = TcpKvStore::Create(server_options);
  ASSERT_TRUE(server.ok());
  GlooCommunicator::Options options;
  options.name = "shard[1]";
  options.rank = 0;
  options.size = 3;
  options.store = server->get();
  options.timeout = absl::Milliseconds(500);
  auto comm = GlooCommunicator::Create(options);
  ASSERT_EQ(comm.status().code(), absl::StatusCode::kDeadlineExceeded) << comm.status();
  EXPECT_EQ(comm.status().message().rfind("group shard[1] op connect step 0: ", 0), 0u)
      << comm.status();
}

}  // namespace
}  // namespace shardline::fsdp
