// Smoke test: LibTorch from the torch 2.11 wheel links and runs tensor math and autograd,
// including the two mechanisms the FSDP engine relies on: re-pointing a parameter at a view of
// one flat buffer with set_data, and a gradient hook on such a parameter.
#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/version.h>

#include "gtest/gtest.h"

namespace {

TEST(TorchSmoke, VersionIsTheWheelsVersion) {
  EXPECT_EQ(TORCH_VERSION_MAJOR, 2);
  EXPECT_EQ(TORCH_VERSION_MINOR, 11);
}

TEST(TorchSmoke, MatmulAndAutogradGiveAnalyticGradients) {
  at::Tensor w = at::tensor({1.0f, 2.0f, 3.0f}).requires_grad_(true);
  at::Tensor x = at::tensor({4.0f, 5.0f, 6.0f});
  at::Tensor y = (w * x).sum() + (w * w).sum();  // dy/dw = x + 2w
  y.backward();
  EXPECT_TRUE(at::allclose(w.grad(), at::tensor({6.0f, 9.0f, 12.0f})));
  EXPECT_FLOAT_EQ(y.item<float>(), 32.0f + 14.0f);
}

TEST(TorchSmoke, ParameterAsViewOfFlatBufferTrainsAndHookFires) {
  at::Tensor flat = at::arange(6, at::kFloat);
  at::Tensor p = at::zeros({2, 3}).requires_grad_(true);
  p.set_data(flat.view({2, 3}));
  int hook_calls = 0;
  at::Tensor seen;
  p.register_hook([&](const at::Tensor& g) {
    ++hook_calls;
    seen = g.clone();
  });
  (p * 2).sum().backward();
  EXPECT_EQ(hook_calls, 1);
  EXPECT_TRUE(at::allclose(seen, at::full({2, 3}, 2.0f)));
  // The parameter still aliases the flat buffer: writing one changes the other.
  flat.zero_();
  EXPECT_EQ(p.sum().item<float>(), 0.0f);
}

}  // namespace
