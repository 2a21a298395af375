#include "trainer/device_select.h"

#include "gtest/gtest.h"

namespace shardline::trainer {
namespace {

TEST(LocalRankDevice, EachLocalRankTakesItsOwnVisibleDevice) {
  for (int local_rank = 0; local_rank < 8; ++local_rank) {
    absl::StatusOr<int> d = LocalRankDevice(local_rank, 8, std::nullopt, /*daemon_launch=*/false);
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ(*d, local_rank);
  }
}

TEST(LocalRankDevice, DaemonLaunchUsesTheOneVisibleDeviceForAnyLocalRank) {
  // The worker daemon gives each rank exactly its own GPU, whatever its LOCAL_RANK.
  absl::StatusOr<int> d = LocalRankDevice(5, 1, std::string("GPU-aaaa"), /*daemon_launch=*/true);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(*d, 0);
}

TEST(LocalRankDevice, TorchrunLaunchOfTwoRanksOnOneVisibleDeviceIsFailedPrecondition) {
  // Not wrapped around: two ranks on one GPU would share its memory and contexts.
  absl::StatusOr<int> d = LocalRankDevice(1, 1, std::string("0"), /*daemon_launch=*/false);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(d.status().message(),
            "LOCAL_RANK 1 but this trainer sees only 1 CUDA device(s) (CUDA_VISIBLE_DEVICES "
            "'0'): start at most one rank per visible GPU on this node");
}

TEST(LocalRankDevice, LocalRankBeyondVisibleDevicesIsFailedPrecondition) {
  absl::StatusOr<int> d = LocalRankDevice(4, 4, std::string("4,5,6,7"), /*daemon_launch=*/false);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(d.status().message(),
            "LOCAL_RANK 4 but this trainer sees only 4 CUDA device(s) (CUDA_VISIBLE_DEVICES "
            "'4,5,6,7'): start at most one rank per visible GPU on this node");
  d = LocalRankDevice(2, 2, std::nullopt, /*daemon_launch=*/true);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(d.status().message().find("(CUDA_VISIBLE_DEVICES unset)"), std::string::npos)
      << d.status();
}

TEST(LocalRankDevice, NegativeLocalRankIsInvalidArgument) {
  absl::StatusOr<int> d = LocalRankDevice(-1, 8, std::nullopt, /*daemon_launch=*/false);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(d.status().message(), "LOCAL_RANK -1 is negative");
}

}  // namespace
}  // namespace shardline::trainer
