#include "data/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <vector>

namespace shardline::data {
namespace {

DistributedSampler MakeSampler(int64_t n, int g, int b, int w, int r, uint64_t seed = 3) {
  auto s = DistributedSampler::Create({n, g, b, w, r, seed});
  EXPECT_TRUE(s.ok()) << s.status();
  return *std::move(s);
}

// The global batches of one step, read by all W ranks together, as a sorted multiset.
std::vector<std::vector<int64_t>> GlobalBatches(int64_t n, int g, int b, int w, int steps) {
  std::vector<DistributedSampler> ranks;
  for (int r = 0; r < w; ++r) ranks.push_back(MakeSampler(n, g, b, w, r));
  std::vector<std::vector<int64_t>> out;
  for (int s = 0; s < steps; ++s) {
    std::vector<int64_t> batch;
    for (auto& rank : ranks) {
      for (const auto& micro : rank.Next()) batch.insert(batch.end(), micro.begin(), micro.end());
    }
    std::sort(batch.begin(), batch.end());
    out.push_back(batch);
  }
  return out;
}

TEST(DistributedSampler, EachSampleExactlyOncePerEpochAcrossRanks) {
  const int64_t n = 96;  // Divisible by G: no sample is skipped.
  const int g = 24;
  for (int w : {1, 2, 3, 4, 6}) {
    for (int b : {1, 2, 4}) {
      if (g % (b * w) != 0) continue;
      std::vector<DistributedSampler> ranks;
      for (int r = 0; r < w; ++r) ranks.push_back(MakeSampler(n, g, b, w, r));
      EXPECT_EQ(ranks[0].accumulation_steps(), g / (b * w));
      std::vector<int> seen(n, 0);
      for (int step = 0; step < n / g; ++step) {
        std::set<int64_t> this_step;
        for (auto& rank : ranks) {
          const auto micro = rank.Next();
          ASSERT_EQ(static_cast<int>(micro.size()), g / (b * w));
          for (const auto& mb : micro) {
            ASSERT_EQ(static_cast<int>(mb.size()), b);
            for (int64_t i : mb) {
              ++seen[i];
              EXPECT_TRUE(this_step.insert(i).second) << "W=" << w << " repeats " << i;
            }
          }
        }
        EXPECT_EQ(static_cast<int>(this_step.size()), g);
      }
      for (int64_t i = 0; i < n; ++i)
        EXPECT_EQ(seen[i], 1) << "W=" << w << " B=" << b << " i=" << i;
      EXPECT_EQ(ranks[0].cursor(), (DataCursor{1, 0}));
    }
  }
}

TEST(DistributedSampler, SameGlobalBatchesAtAnyWorldSize) {
  const auto w1 = GlobalBatches(100, 12, 2, 1, 20);  // 8 steps per epoch: crosses epochs.
  EXPECT_EQ(GlobalBatches(100, 12, 2, 2, 20), w1);
  EXPECT_EQ(GlobalBatches(100, 12, 2, 3, 20), w1);
  EXPECT_EQ(GlobalBatches(100, 12, 1, 4, 20), w1);
  EXPECT_EQ(GlobalBatches(100, 12, 6, 2, 20), w1);
}

TEST(DistributedSampler, EpochsShuffleDifferentlyAndDeterministically) {
  auto s = MakeSampler(50, 10, 5, 2, 0, 42);
  EXPECT_NE(s.EpochOrder(0), s.EpochOrder(1));
  EXPECT_EQ(s.EpochOrder(3), MakeSampler(50, 10, 5, 2, 1, 42).EpochOrder(3));
  EXPECT_NE(s.EpochOrder(0), MakeSampler(50, 10, 5, 2, 0, 43).EpochOrder(0));
  std::vector<int64_t> sorted = s.EpochOrder(0);
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 50; ++i) EXPECT_EQ(sorted[i], i);
}

TEST(DistributedSampler, ResumeFromCursorSeesTheSameBatches) {
  for (int w : {1, 2}) {
    auto straight = MakeSampler(70, 8, 2, w, w - 1);
    std::vector<std::vector<std::vector<int64_t>>> expected;
    for (int i = 0; i < 30; ++i) expected.push_back(straight.Next());

    auto first = MakeSampler(70, 8, 2, w, w - 1);
    for (int i = 0; i < 13; ++i) EXPECT_EQ(first.Next(), expected[i]);
    const DataCursor saved = first.cursor();  // Mid second epoch (8 steps per epoch).
    EXPECT_EQ(saved, (DataCursor{1, 40}));

    auto resumed = MakeSampler(70, 8, 2, w, w - 1);
    ASSERT_TRUE(resumed.Restore(saved).ok());
    for (int i = 13; i < 30; ++i) EXPECT_EQ(resumed.Next(), expected[i]) << "step " << i;
  }
}

// A run started from a checkpoint that carries no cursor (PyTorch DCP) places it by the step.
TEST(DistributedSampler, CursorAfterStepsIsWhereNextLeavesIt) {
  auto s = MakeSampler(70, 8, 2, 2, 1);
  for (int64_t steps = 0; steps < 30; ++steps) {
    EXPECT_EQ(s.CursorAfterSteps(steps), s.cursor()) << steps;
    s.Next();
  }
}

TEST(DistributedSampler, ResumeAtAnotherWorldSizeKeepsGlobalBatches) {
  // Saved at W=4, resumed at W=2: the union over ranks of each step is unchanged.
  auto reference = GlobalBatches(64, 8, 1, 1, 12);
  std::vector<DistributedSampler> w2;
  for (int r = 0; r < 2; ++r) {
    w2.push_back(MakeSampler(64, 8, 1, 2, r));
    ASSERT_TRUE(w2.back().Restore({0, 40}).ok());
  }
  for (int step = 5; step < 12; ++step) {
    std::vector<int64_t> batch;
    for (auto& s : w2) {
      for (const auto& mb : s.Next()) batch.insert(batch.end(), mb.begin(), mb.end());
    }
    std::sort(batch.begin(), batch.end());
    EXPECT_EQ(batch, reference[step]) << "step " << step;
  }
}

TEST(DistributedSampler, RejectsBadShapesAndCursors) {
  auto bad = DistributedSampler::Create({100, 10, 4, 2, 0, 0});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      bad.status().message(),
      "train.global_batch_size: 10 is not divisible by micro_batch_size * world_size = 4 * 2");
  auto small = DistributedSampler::Create({5, 8, 4, 2, 0, 0});
  EXPECT_EQ(small.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(
      small.status().message().find("5 training sequences are fewer than one global batch of 8"),
      absl::string_view::npos);
  auto rank = DistributedSampler::Create({100, 8, 4, 2, 2, 0});
  EXPECT_EQ(rank.status().message(), "rank 2 is not in [0, world_size 2)");
  auto s = MakeSampler(70, 8, 2, 2, 0);
  EXPECT_EQ(s.Restore({0, 12}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.Restore({0, 64}).code(), absl::StatusCode::kInvalidArgument);  // No full batch left.
  EXPECT_TRUE(s.Restore({0, 56}).ok());
}

TEST(ValidationIndices, RanksReadDisjointConsecutiveSequences) {
  EXPECT_EQ(ValidationIndices(0, 2, 2, 0, 100), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(ValidationIndices(0, 2, 2, 1, 100), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(ValidationIndices(1, 2, 2, 0, 100), (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(ValidationIndices(1, 2, 2, 1, 6), (std::vector<int64_t>{0, 1}));  // Wraps.
}

}  // namespace
}  // namespace shardline::data
