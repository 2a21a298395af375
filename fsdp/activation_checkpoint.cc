#include "fsdp/activation_checkpoint.h"

#include <mutex>
#include <utility>

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/core/Generator.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

namespace shardline::fsdp {
namespace internal {

// Runs the body without grad in forward (saving only the input) and recomputes it with grad in
// backward. `anchor` is an empty tensor that requires grad, so the output requires grad (and
// backward reaches this node) even when the input does not.
struct CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, at::Tensor input,
                            at::Tensor anchor, int64_t checkpointer, int64_t call) {
    ctx->save_for_backward({input});
    ctx->saved_data["checkpointer"] = checkpointer;
    ctx->saved_data["call"] = call;
    ctx->saved_data["input_requires_grad"] = input.requires_grad();
    return reinterpret_cast<ActivationCheckpointer*>(checkpointer)->Forward(call, input);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* checkpointer =
        reinterpret_cast<ActivationCheckpointer*>(ctx->saved_data["checkpointer"].toInt());
    at::Tensor dx =
        checkpointer->Backward(ctx->saved_data["call"].toInt(), ctx->get_saved_variables()[0],
                               ctx->saved_data["input_requires_grad"].toBool(), grads[0]);
    return {dx, torch::autograd::Variable(), torch::autograd::Variable(),
            torch::autograd::Variable()};
  }
};

}  // namespace internal

at::Tensor ActivationCheckpointer::Run(const UnitBody& body, const at::Tensor& input) {
  Call call;
  call.body = body;
  at::Generator gen = at::globalContext().defaultGenerator(input.device());
  {
    std::lock_guard<std::mutex> lock(gen.mutex());
    call.rng_state = gen.get_state();
  }
  calls_.push_back(std::move(call));
  return internal::CheckpointFunction::apply(
      input, at::empty({0}, input.options()).requires_grad_(true), reinterpret_cast<int64_t>(this),
      static_cast<int64_t>(calls_.size() - 1));
}

at::Tensor ActivationCheckpointer::Forward(int64_t call, const at::Tensor& input) {
  at::NoGradGuard no_grad;
  return calls_.at(call).body(input);
}

at::Tensor ActivationCheckpointer::Backward(int64_t call, const at::Tensor& input,
                                            bool input_requires_grad, const at::Tensor& grad) {
  if (!grad.defined()) return at::Tensor();
  const Call& c = calls_.at(call);
  at::Tensor x = input.detach();
  x.requires_grad_(input_requires_grad);
  at::Tensor y;
  {
    at::AutoGradMode grad_mode(true);
    at::Generator gen = at::globalContext().defaultGenerator(input.device());
    at::Tensor now;
    {
      std::lock_guard<std::mutex> lock(gen.mutex());
      now = gen.get_state();
      gen.set_state(c.rng_state);
    }
    y = c.body(x);
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(now);
  }
  if (!y.requires_grad()) return at::Tensor();
  // Reentrant backward through the recomputed graph: accumulates the unit's parameter
  // gradients (their hooks reduce and free the unit) and the input's.
  torch::autograd::backward({y}, {grad});
  return x.requires_grad() ? x.grad() : at::Tensor();
}

}  // namespace shardline::fsdp
