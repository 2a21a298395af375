#include "fsdp/gather_limiter.h"

#include "gtest/gtest.h"

namespace shardline::fsdp {
namespace {

TEST(GatherLimiter, RefusesAPrefetchThatWouldMakeAThirdGroup) {
  GatherLimiter limiter(/*enabled=*/true);
  EXPECT_TRUE(limiter.AllowPrefetch(0));
  limiter.MarkGathered(0);
  EXPECT_TRUE(limiter.AllowPrefetch(1));
  limiter.MarkGathered(1);
  EXPECT_TRUE(limiter.AllowPrefetch(1));  // Counted already.
  EXPECT_FALSE(limiter.AllowPrefetch(2));
  EXPECT_EQ(limiter.prefetches_skipped(), 1);
  limiter.MarkReleased(0);
  EXPECT_FALSE(limiter.IsGathered(0));
  EXPECT_TRUE(limiter.AllowPrefetch(2));
  limiter.MarkGathered(2);
  EXPECT_EQ(limiter.peak_gathered_groups(), 2);
  EXPECT_EQ(limiter.prefetches_skipped(), 1);
}

TEST(GatherLimiter, DisabledAllowsEveryPrefetchAndStillTracksThePeak) {
  GatherLimiter limiter(/*enabled=*/false);
  for (int g = 0; g < 4; ++g) {
    EXPECT_TRUE(limiter.AllowPrefetch(g));
    limiter.MarkGathered(g);  // On-demand gathers are counted the same way.
  }
  EXPECT_EQ(limiter.peak_gathered_groups(), 4);
  EXPECT_EQ(limiter.prefetches_skipped(), 0);
  limiter.MarkReleased(7);  // Not counted: no-op.
  EXPECT_TRUE(limiter.IsGathered(3));
}

}  // namespace
}  // namespace shardline::fsdp
