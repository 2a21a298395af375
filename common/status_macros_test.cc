#include "common/status_macros.h"

#include "gtest/gtest.h"

namespace shardline {
namespace {

absl::StatusOr<int> Half(int x) {
  if (x % 2 != 0) return absl::InvalidArgumentError("odd");
  return x / 2;
}

absl::StatusOr<int> Quarter(int x) {
  ASSIGN_OR_RETURN(int half, Half(x));
  ASSIGN_OR_RETURN(int quarter, Half(half));
  return quarter;
}

absl::Status CheckEven(int x) {
  RETURN_IF_ERROR(Half(x).status());
  return absl::OkStatus();
}

TEST(StatusMacros, AssignOrReturnUnwrapsValues) { EXPECT_EQ(*Quarter(8), 2); }

TEST(StatusMacros, AssignOrReturnPropagatesTheFirstError) {
  const absl::StatusOr<int> result = Quarter(6);  // 6 -> 3 -> odd
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(result.status().message(), "odd");
}

TEST(StatusMacros, ReturnIfErrorPropagates) {
  EXPECT_TRUE(CheckEven(4).ok());
  EXPECT_EQ(CheckEven(5).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace shardline
