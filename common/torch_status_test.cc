#include "common/torch_status.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

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

TEST(TorchStatus, StatusExceptionComesBackAsTheOriginalStatus) {
  const absl::Status lost = absl::UnavailableError(
      "group shard[0] op reduce_scatter step 7: peer rank 1 closed the connection");
  const absl::StatusOr<int> r = TorchTry("sample", [&]() -> int {
    ThrowIfError(lost);
    return 1;
  });
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status(), lost);  // Code and message unchanged: no "sample: " prefix.

  const absl::Status timeout =
      absl::DeadlineExceededError("group replicate[1] op all_reduce step 3: timed out after 30s");
  const absl::Status s = TorchCall("backward", [&] { throw StatusException(timeout); });
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(s.message(), timeout.message());
}

// A status thrown from inside an autograd function's backward (as the FSDP engine's hooks do)
// survives LibTorch's autograd engine, which rethrows it on the calling thread.
struct ThrowingBackward : public torch::autograd::Function<ThrowingBackward> {
  static at::Tensor forward(torch::autograd::AutogradContext*, at::Tensor x) { return x * 2; }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*,
                                                 torch::autograd::variable_list) {
    ThrowIfError(absl::UnavailableError("group shard[1] op reduce_scatter step 2: peer lost"));
    return {at::Tensor()};
  }
};

TEST(TorchStatus, StatusThrownInAnAutogradBackwardRoundTrips) {
  at::Tensor x = at::ones({3}).requires_grad_(true);
  const absl::Status s = TorchCall("backward", [&] {
    at::Tensor y = ThrowingBackward::apply(x).sum();
    torch::autograd::backward({y});
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_EQ(s.message(), "group shard[1] op reduce_scatter step 2: peer lost");
}

TEST(TorchStatus, ThrowIfErrorDoesNothingForOk) {
  EXPECT_TRUE(TorchCall("ok", [] { ThrowIfError(absl::OkStatus()); }).ok());
}

}  // namespace
}  // namespace shardline
