#include "common/torch_status.h"

#include <ATen/ATen.h>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace shardline {
namespace {

TEST(TorchStatus, ShapeMismatchBecomesInternalWithMessage) {
  const absl::StatusOr<at::Tensor> r = TorchTry("matmul", [] {
    return at::matmul(at::ones({2, 3}), at::ones({4, 5}));
  });
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(absl::StartsWith(r.status().message(), "matmul: ")) << r.status();
  EXPECT_NE(r.status().message().find("cannot be multiplied"), std::string::npos) << r.status();
}

TEST(TorchStatus, IndexErrorBecomesInvalidArgument) {
  const absl::Status s = TorchCall("select", [] { (void)at::ones({2}).select(0, 7); });
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
}

TEST(TorchStatus, SuccessPassesValueThrough) {
  const absl::StatusOr<double> r =
      TorchTry("sum", [] { return at::ones({3}).sum().item<double>(); });
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 3.0);
}

}  // namespace
}  // namespace shardline
