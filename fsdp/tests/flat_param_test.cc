#include "fsdp/flat_param.h"

#include <ATen/ATen.h>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace shardline::fsdp {
namespace {

std::vector<FlatParamEntry> Entries(std::vector<at::Tensor>* keep) {
  // 2x3 + 5 = 11 elements: with S = 4, padded to 12, shards of 3.
  keep->push_back(at::arange(6, at::kFloat).view({2, 3}).set_requires_grad(true));
  keep->push_back((at::arange(5, at::kFloat) + 100).set_requires_grad(true));
  std::vector<FlatParamEntry> out(2);
  out[0].name = "a";
  out[0].param = (*keep)[0];
  out[1].name = "b";
  out[1].param = (*keep)[1];
  return out;
}

TEST(FlatParam, ShardsArePaddedEqualSlicesOfTheConcatenation) {
  for (int r = 0; r < 4; ++r) {
    std::vector<at::Tensor> keep;
    auto fp = FlatParam::Create("u", Entries(&keep), r, 4);
    ASSERT_TRUE(fp.ok()) << fp.status();
    EXPECT_EQ((*fp)->numel(), 11);
    EXPECT_EQ((*fp)->padded_numel(), 12);
    EXPECT_EQ((*fp)->shard_numel(), 3);
    EXPECT_EQ((*fp)->valid_shard_numel(), r == 3 ? 2 : 3);
    at::Tensor flat =
        at::cat({at::arange(6, at::kFloat), at::arange(5, at::kFloat) + 100, at::zeros({1})});
    EXPECT_TRUE(at::equal((*fp)->shard(), flat.narrow(0, 3 * r, 3))) << r;
    EXPECT_FALSE((*fp)->full_allocated());
    EXPECT_EQ((*fp)->full_bytes(), 0);
  }
}

TEST(FlatParam, LocalRangesSplitParametersAcrossShards) {
  std::vector<at::Tensor> keep;
  auto fp = FlatParam::Create("u", Entries(&keep), 1, 4);  // Holds flat [3, 6).
  ASSERT_TRUE(fp.ok());
  FlatParam::LocalRange a = (*fp)->LocalRangeOf(0);
  EXPECT_EQ(a.start, 3);
  EXPECT_EQ(a.end, 6);
  EXPECT_EQ(a.shard_offset, 0);
  FlatParam::LocalRange b = (*fp)->LocalRangeOf(1);
  EXPECT_EQ(b.start, b.end);  // None of "b".
}

TEST(FlatParam, ParametersAreViewsOfTheGatheredBufferAndGradsOfTheFlatGrad) {
  std::vector<at::Tensor> keep;
  auto fp = FlatParam::Create("u", Entries(&keep), 0, 2);
  ASSERT_TRUE(fp.ok());
  (*fp)->AllocateFull();
  (*fp)->full().copy_(at::arange(12, at::kFloat) * 2);  // What an all-gather would write.
  EXPECT_TRUE(at::equal(keep[0], (at::arange(6, at::kFloat) * 2).view({2, 3})));
  EXPECT_TRUE(at::equal(keep[1], at::arange(6, 11, at::kFloat) * 2));
  EXPECT_EQ((*fp)->full_bytes(), 48);
  (*fp)->AllocateFullGrad();
  (keep[0] * 3).sum().backward();
  EXPECT_TRUE(at::equal((*fp)->full_grad().narrow(0, 0, 6), at::full({6}, 3.0f)));
  EXPECT_TRUE(at::equal((*fp)->full_grad().narrow(0, 6, 6), at::zeros({6})));
  (*fp)->FreeFullGrad();
  EXPECT_FALSE(keep[0].grad().defined());
  (*fp)->FreeFull();
  EXPECT_EQ((*fp)->full_bytes(), 0);
}

TEST(FlatParam, RejectsNonFloatAndBadShardRank) {
  std::vector<FlatParamEntry> e(1);
  e[0].name = "ids";
  e[0].param = at::zeros({3}, at::kLong);
  auto fp = FlatParam::Create("u", e, 0, 1);
  ASSERT_FALSE(fp.ok());
  EXPECT_EQ(fp.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(fp.status().message(), "ids"));
  std::vector<at::Tensor> keep;
  fp = FlatParam::Create("u", Entries(&keep), 2, 2);
  EXPECT_EQ(fp.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace shardline::fsdp
