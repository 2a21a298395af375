#include "fsdp/sharded_optimizer.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace shardline::fsdp {
namespace {

absl::Status CheckRange(const char* name, double v, double lo, double hi, bool lo_open) {
  if ((lo_open ? v <= lo : v < lo) || v >= hi || std::isnan(v)) {
    return absl::InvalidArgumentError(absl::StrCat("optimizer.", name, ": ", v, " not in ",
                                                   lo_open ? "(" : "[", lo, ", ", hi, ")"));
  }
  return absl::OkStatus();
}

// Sum of squares of a contiguous float32 host tensor, accumulated in float64 (as the op-by-op
// path's to(kDouble).pow(2).sum(), but in one pass without a float64 copy), over LibTorch's
// intra-op threads: each thread sums fixed 64Ki-element chunks, so the result does not depend on
// the thread count.
double HostSumOfSquares(const at::Tensor& t) {
  const float* x = t.data_ptr<float>();
  const int64_t n = t.numel();
  constexpr int64_t kChunk = int64_t{1} << 16;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(chunks, 0.0);
  at::parallel_for(0, chunks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      double s = 0;
      for (int64_t i = c * kChunk, e = std::min(n, i + kChunk); i < e; ++i) {
        s += static_cast<double>(x[i]) * x[i];
      }
      partial[c] = s;
    }
  });
  double sum = 0;
  for (double s : partial) sum += s;
  return sum;
}

}  // namespace

ShardedOptimizer::ShardedOptimizer(FsdpEngine* engine, const ShardedOptimizerOptions& options)
    : engine_(engine), options_(options) {}

absl::StatusOr<std::unique_ptr<ShardedOptimizer>> ShardedOptimizer::Create(
    FsdpEngine* engine, const ShardedOptimizerOptions& o) {
  if (engine == nullptr) return absl::InvalidArgumentError("ShardedOptimizer: engine is null");
  constexpr double kInf = HUGE_VAL;
  RETURN_IF_ERROR(CheckRange("lr", o.lr, 0, kInf, /*lo_open=*/true));
  RETURN_IF_ERROR(CheckRange("weight_decay", o.weight_decay, 0, kInf, false));
  RETURN_IF_ERROR(CheckRange("grad_clip", o.grad_clip, 0, kInf, false));
  if (o.kind == ShardedOptimizerOptions::Kind::kAdamW) {
    RETURN_IF_ERROR(CheckRange("beta1", o.beta1, 0, 1, false));
    RETURN_IF_ERROR(CheckRange("beta2", o.beta2, 0, 1, false));
    RETURN_IF_ERROR(CheckRange("eps", o.eps, 0, kInf, true));
  } else {
    RETURN_IF_ERROR(CheckRange("momentum", o.momentum, 0, 1, false));
  }
  if (o.fused && o.kind != ShardedOptimizerOptions::Kind::kAdamW) {
    return absl::InvalidArgumentError("ShardedOptimizer: fused is implemented for AdamW only");
  }
  auto opt = std::unique_ptr<ShardedOptimizer>(new ShardedOptimizer(engine, o));
  for (const auto& f : engine->flat_params()) {
    const auto opts = f->shard().options();
    const int64_t n = f->valid_shard_numel();
    if (o.kind == ShardedOptimizerOptions::Kind::kAdamW) {
      opt->exp_avg_.push_back(at::zeros({n}, opts));
      opt->exp_avg_sq_.push_back(at::zeros({n}, opts));
      if (o.fused) opt->step_tensors_.push_back(at::zeros({}, opts));
    } else if (o.momentum > 0) {
      opt->momentum_.push_back(at::zeros({n}, opts));
    }
  }
  return opt;
}

absl::StatusOr<double> ShardedOptimizer::Step() {
  if (engine_->gradients_pending()) {
    return absl::FailedPreconditionError(
        "ShardedOptimizer::Step: gradients of no_sync micro-batches are not reduced yet; call "
        "Backward(loss, /*sync_gradients=*/true) on the last micro-batch");
  }
  at::NoGradGuard no_grad;
  const auto& flats = engine_->flat_params();
  // cpu_offload: the host shards are about to be written; no host->device copy may still read
  // them (Backward already waited for the device, so this costs nothing in a training step).
  engine_->WaitForOffloadCopies();
  last_step_skipped_ = false;
  if (grad_scale_ != 1.0 && !options_.fused) {
    for (const auto& f : flats) f->shard_grad().mul_(1.0 / grad_scale_);
  }
  // Global norm: local sum of squares in float64, summed over the shard group only. (fused: of
  // the still-scaled gradients, divided by the scale below.) The partial sums accumulate on the
  // gradients' device in the same order as a host accumulator would (the same float64 result)
  // and come to the host once, in item() below: one device synchronisation per step, not one per
  // flat parameter.
  const at::Device grad_device =
      flats.empty() ? at::Device(at::kCPU) : flats[0]->shard_grad().device();
  at::Tensor sq = at::zeros({1}, at::TensorOptions().dtype(at::kDouble).device(grad_device));
  double host_sq = 0;
  for (const auto& f : flats) {
    at::Tensor g = f->shard_grad().narrow(0, 0, f->valid_shard_numel());
    if (options_.fused && g.is_cpu()) {
      host_sq += HostSumOfSquares(g);
    } else {
      sq.add_(g.to(at::kDouble).pow(2).sum());
    }
  }
  sq.add_(host_sq);
  Communicator* shard = engine_->shard_comm();
  if (shard != nullptr && shard->size() > 1) {
    // The communicator's device (NCCL reduces CUDA tensors only), also when the shards are
    // offloaded to the host.
    at::Tensor dev = sq.to(engine_->device());
    RETURN_IF_ERROR(shard->AllReduce(dev, ReduceOp::kSum));
    sq = dev;
  }
  const double sum_of_squares = sq.item<double>();
  // CUDA: that read waited for every collective of the step (the gradient reductions' Waits
  // returned at once, ordering the device only), or for its watchdog's abort, which leaves the
  // reduced gradients undefined. Fail the step before the update touches the parameters.
  RETURN_IF_ERROR(engine_->CommAsyncError());
  const double norm = std::sqrt(sum_of_squares) / (options_.fused ? grad_scale_ : 1.0);
  if (grad_scale_ != 1.0 && !std::isfinite(norm)) {
    last_step_skipped_ = true;
    engine_->ZeroShardGrads();
    return norm;
  }
  double coef = 1.0;
  if (options_.grad_clip > 0) {
    coef = std::min(1.0, options_.grad_clip / (norm + 1e-6));
    // torch::nn::utils::clip_grad_norm_ multiplies by the clamped coefficient always.
    if (!options_.fused) {
      for (const auto& f : flats) f->shard_grad().mul_(coef);
    }
  }

  ++step_;
  const auto& o = options_;
  if (o.fused) {
    FusedAdamW(grad_scale_ / coef);
    engine_->ZeroShardGrads();
    return norm;
  }
  for (size_t i = 0; i < flats.size(); ++i) {
    const FlatParam& f = *flats[i];
    const int64_t n = f.valid_shard_numel();
    if (n == 0) continue;
    at::Tensor p = f.shard().narrow(0, 0, n);
    at::Tensor g = f.shard_grad().narrow(0, 0, n);
    if (o.kind == ShardedOptimizerOptions::Kind::kAdamW) {
      if (o.weight_decay != 0) p.mul_(1 - o.lr * o.weight_decay);
      const double bc1 = 1 - std::pow(o.beta1, static_cast<double>(step_));
      const double bc2 = 1 - std::pow(o.beta2, static_cast<double>(step_));
      exp_avg_[i].mul_(o.beta1).add_(g, 1 - o.beta1);
      exp_avg_sq_[i].mul_(o.beta2).addcmul_(g, g, 1 - o.beta2);
      at::Tensor denom = (exp_avg_sq_[i].sqrt() / std::sqrt(bc2)).add_(o.eps);
      p.addcdiv_(exp_avg_[i], denom, -(o.lr / bc1));
    } else {
      at::Tensor d = g;
      if (o.weight_decay != 0) d = d.add(p, o.weight_decay);
      if (o.momentum > 0) {
        // LibTorch initialises the buffer with the first gradient (no dampening).
        if (step_ == 1) {
          momentum_[i].copy_(d);
        } else {
          momentum_[i].mul_(o.momentum).add_(d);
        }
        d = momentum_[i];
      }
      p.add_(d, -o.lr);
    }
  }
  engine_->ZeroShardGrads();
  return norm;
}

void ShardedOptimizer::FusedAdamW(double grad_divisor) {
  const auto& flats = engine_->flat_params();
  std::vector<at::Tensor> params, grads, exp_avgs, exp_avg_sqs, steps;
  for (size_t i = 0; i < flats.size(); ++i) {
    const int64_t n = flats[i]->valid_shard_numel();
    if (n == 0) continue;
    params.push_back(flats[i]->shard().narrow(0, 0, n));
    grads.push_back(flats[i]->shard_grad().narrow(0, 0, n));
    exp_avgs.push_back(exp_avg_[i]);
    exp_avg_sqs.push_back(exp_avg_sq_[i]);
    // The kernel reads the step count (bias correction) but does not advance it.
    step_tensors_[i].fill_(static_cast<double>(step_));
    steps.push_back(step_tensors_[i]);
  }
  if (params.empty()) return;
  const auto& o = options_;
  // The kernel divides each gradient by grad_scale (in place) before the update.
  std::optional<at::Tensor> grad_scale;
  if (grad_divisor != 1.0) grad_scale = at::full({}, grad_divisor, params[0].options());
  at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, /*max_exp_avg_sqs=*/{}, steps, o.lr,
                    o.beta1, o.beta2, o.weight_decay, o.eps, /*amsgrad=*/false,
                    /*maximize=*/false, grad_scale, /*found_inf=*/std::nullopt);
}

int64_t ShardedOptimizer::state_bytes() const {
  int64_t b = 0;
  for (const auto* v : {&exp_avg_, &exp_avg_sq_, &momentum_}) {
    for (const at::Tensor& t : *v) b += t.numel() * t.element_size();
  }
  return b;
}

std::vector<ShardSlice> ShardedOptimizer::LocalState() const {
  std::vector<ShardSlice> out;
  const auto& flats = engine_->flat_params();
  auto add = [&](const std::vector<at::Tensor>& state, const char* suffix) {
    for (size_t i = 0; i < state.size() && i < flats.size(); ++i) {
      const FlatParam& f = *flats[i];
      for (size_t e = 0; e < f.entries().size(); ++e) {
        FlatParam::LocalRange r = f.LocalRangeOf(e);
        ShardSlice s;
        s.name = absl::StrCat(f.entries()[e].name, ".", suffix);
        s.global_shape = f.entries()[e].shape;
        s.start = r.start;
        s.end = r.end;
        s.local = state[i].narrow(0, r.shard_offset, r.end - r.start);
        out.push_back(std::move(s));
      }
    }
  };
  add(exp_avg_, "exp_avg");
  add(exp_avg_sq_, "exp_avg_sq");
  add(momentum_, "momentum_buffer");
  return out;
}

std::vector<std::pair<const char*, std::vector<at::Tensor>*>> ShardedOptimizer::Kinds() {
  std::vector<std::pair<const char*, std::vector<at::Tensor>*>> out;
  if (!exp_avg_.empty()) out.emplace_back("exp_avg", &exp_avg_);
  if (!exp_avg_sq_.empty()) out.emplace_back("exp_avg_sq", &exp_avg_sq_);
  if (!momentum_.empty()) out.emplace_back("momentum_buffer", &momentum_);
  return out;
}

absl::StatusOr<std::vector<std::pair<std::string, at::Tensor>>> ShardedOptimizer::FullState(
    bool rank0_only) {
  at::NoGradGuard no_grad;
  const auto& flats = engine_->flat_params();
  Communicator* shard = engine_->shard_comm();
  const bool keep = !rank0_only || (engine_->rank() == 0);
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (auto& [suffix, tensors] : Kinds()) {
    for (size_t i = 0; i < flats.size(); ++i) {
      const FlatParam& f = *flats[i];
      // State covers only the valid prefix of the shard; pad it back to shard_numel to gather.
      // With cpu_offload the state is on the host: it is gathered on the communicator's
      // device and comes back to the host.
      at::Tensor padded =
          at::zeros({f.shard_numel()}, f.shard().options().device(engine_->device()));
      padded.narrow(0, 0, f.valid_shard_numel()).copy_((*tensors)[i]);
      at::Tensor full = padded;
      if (f.shard_count() > 1) {
        full = at::empty({f.padded_numel()}, padded.options());
        RETURN_IF_ERROR(shard->AllGather(padded, full));
      }
      if (f.offloaded()) full = full.to(at::kCPU);
      if (!keep) continue;
      for (const FlatParamEntry& e : f.entries()) {
        out.emplace_back(absl::StrCat(e.name, ".", suffix),
                         full.narrow(0, e.offset, e.numel).view(e.shape).clone());
      }
    }
  }
  return out;
}

absl::Status ShardedOptimizer::LoadFullState(const std::map<std::string, at::Tensor>& state) {
  at::NoGradGuard no_grad;
  const auto& flats = engine_->flat_params();
  for (auto& [suffix, tensors] : Kinds()) {
    for (size_t i = 0; i < flats.size(); ++i) {
      const FlatParam& f = *flats[i];
      for (size_t e = 0; e < f.entries().size(); ++e) {
        const FlatParamEntry& entry = f.entries()[e];
        const std::string name = absl::StrCat(entry.name, ".", suffix);
        auto it = state.find(name);
        if (it == state.end()) {
          return absl::InvalidArgumentError(absl::StrCat("optimizer state: ", name, " missing"));
        }
        if (it->second.numel() != entry.numel) {
          return absl::InvalidArgumentError(absl::StrCat("optimizer state: ", name, " has ",
                                                         it->second.numel(), " elements, expected ",
                                                         entry.numel));
        }
        FlatParam::LocalRange r = f.LocalRangeOf(e);
        if (r.end == r.start) continue;
        (*tensors)[i]
            .narrow(0, r.shard_offset, r.end - r.start)
            .copy_(it->second.reshape({-1}).narrow(0, r.start, r.end - r.start));
      }
    }
  }
  return absl::OkStatus();
}

int64_t PersistentStateBytes(const FsdpEngine& engine, const ShardedOptimizer& optimizer) {
  const MemoryStats m = engine.memory_stats();
  return m.param_shard_bytes + m.grad_shard_bytes + optimizer.state_bytes();
}

int64_t DevicePersistentStateBytes(const FsdpEngine& engine, const ShardedOptimizer& optimizer) {
  const MemoryStats m = engine.memory_stats();
  return m.device_shard_bytes + (engine.cpu_offload() ? 0 : optimizer.state_bytes());
}

}  // namespace shardline::fsdp
