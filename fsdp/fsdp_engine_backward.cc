// FsdpEngine's backward pass and gradient reduction (the class is fsdp_engine.h's; construction,
// the gather schedule and forward are in fsdp_engine.cc): re-gathers before each unit's backward,
// the reduce-scatter in the shard group and the all-reduce across replicas once a unit's
// gradients are all in, accumulation into the gradient shards (with CPU offload, copies to the
// host), and the step-level Backward that drives it (docs/fsdp_step.md "Backward").
#include <algorithm>
#include <utility>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/autograd/autograd.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "common/torch_status.h"
#include "fsdp/fsdp_engine.h"

namespace shardline::fsdp {
namespace {

// How long WaitForOffloadCopies keeps waiting for the device once a communicator failed: its
// watchdog aborted the communicator, which ends the kernels the copies are queued behind.
constexpr absl::Duration kDrainAfterCommError = absl::Seconds(10);
// How often it polls the copies' event.
constexpr absl::Duration kDrainPoll = absl::Microseconds(100);

}  // namespace

// ---- Backward --------------------------------------------------------------------------------

void FsdpEngine::PreBackward(int group) {
  c10::OptionalDeviceGuard guard = DeviceScope();
  for (int u : hook_groups_[group]) {
    absl::Status s = Gather(u);
    if (!s.ok()) throw StatusException(s);
    units_[u]->flat->AllocateFullGrad();
  }
  peaks_.Update(flats_);
  if (options_.backward_prefetch == FsdpEngineOptions::BackwardPrefetch::kPre) {
    PrefetchNeighbour(group, -1);
  }
}

void FsdpEngine::OnParamGradReady(int unit) {
  Unit& u = *units_[unit];
  ++u.grads_ready;
  if (u.grads_ready == u.grads_expected) {
    absl::Status s = PostBackward(unit);
    if (!s.ok()) throw StatusException(s);
  }
}

absl::Status FsdpEngine::PostBackward(int unit) {
  Unit& u = *units_[unit];
  if (u.post_backward_done) return absl::OkStatus();
  u.post_backward_done = true;
  if (sync_ && u.flat->full_grad_allocated()) {
    RETURN_IF_ERROR(StartReduce(unit));
    // Without overlap (or with nothing to communicate) the reduction completes here.
    if (!options_.overlap_reduce || pending_reduces_.back().handle == nullptr) {
      while (!pending_reduces_.empty()) RETURN_IF_ERROR(FinishOldestReduce());
    }
  }
  Free(unit);
  if (in_backward_ && u.hook_group >= 0 &&
      options_.backward_prefetch == FsdpEngineOptions::BackwardPrefetch::kPost) {
    bool group_done = true;
    for (int other : hook_groups_[u.hook_group]) {
      group_done = group_done && units_[other]->post_backward_done;
    }
    if (group_done) PrefetchNeighbour(u.hook_group, -1);
  }
  return absl::OkStatus();
}

at::Tensor FsdpEngine::ReduceSource(const FlatParam& flat) const {
  const at::Tensor& g = flat.full_grad();
  const at::ScalarType reduce = ToScalarType(options_.reduce_dtype);
  return g.scalar_type() == reduce ? g : g.to(reduce);
}

absl::Status FsdpEngine::StartReduce(int unit) {
  FlatParam* flat = units_[unit]->flat;
  at::NoGradGuard no_grad;
  PendingReduce p;
  p.unit = unit;
  p.src = ReduceSource(*flat);
  if (flat->shard_count() == 1) {
    p.reduced = p.src;  // S == 1: no reduce-scatter; the replicate all-reduce, if any.
    if (Collective(replicate_)) p.handle = replicate_->AllReduceAsync(p.reduced, ReduceOp::kAvg);
  } else {
    p.reduced = at::empty({flat->shard_numel()}, p.src.options());
    // p.src (the flat gradient or its cast) is dropped once reduced: it may be reduced in.
    p.handle = shard_->ReduceScatterConsumingAsync(p.src, p.reduced, ReduceOp::kAvg);
    if (device_.is_cuda() && Collective(replicate_)) {
      // HYBRID_SHARD on CUDA: the replicate all-reduce is issued now, chained on the
      // reduce-scatter's done event through a side stream (the handle's Wait orders the current
      // stream, the side stream here, after it without blocking the host; the all-reduce's
      // ready event is recorded on it). The compute stream does not wait, so backward goes on
      // while both collectives run; FinishOldestReduce waits for the all-reduce.
      c10::StreamGuard side(ReplicateStream());
      absl::Status s = p.handle->Wait();
      if (!s.ok()) return Fail(s);
      p.handle = replicate_->AllReduceAsync(p.reduced, ReduceOp::kAvg);
      p.replicated = true;
    }
  }
  pending_reduces_.push_back(std::move(p));
  // The bound on reductions in flight (docs/fsdp_step.md): the new one is issued before the
  // oldest is waited for, so up to three are queued for a moment and two stay in flight.
  while (pending_reduces_.size() > 2) RETURN_IF_ERROR(FinishOldestReduce());
  return absl::OkStatus();
}

absl::Status FsdpEngine::FinishOldestReduce() {
  PendingReduce p = std::move(pending_reduces_.front());
  pending_reduces_.erase(pending_reduces_.begin());
  if (p.handle != nullptr) {
    absl::Status s = p.handle->Wait();
    if (!s.ok()) return Fail(s);
  }
  FlatParam* flat = units_[p.unit]->flat;
  at::NoGradGuard no_grad;
  if (flat->shard_count() > 1 && Collective(replicate_) && !p.replicated) {
    absl::Status s = replicate_->AllReduce(p.reduced, ReduceOp::kAvg);
    if (!s.ok()) return Fail(s);
  }
  AccumulateShardGrad(p.unit, p.reduced);
  flat->FreeFullGrad();
  return absl::OkStatus();
}

void FsdpEngine::AccumulateShardGrad(int unit, const at::Tensor& reduced) {
  FlatParam* flat = units_[unit]->flat;
  if (!flat->offloaded()) {
    flat->shard_grad().add_(reduced);
    return;
  }
  // The device->host copy is queued on the device after the reduction (which the handle's
  // Wait ordered before it); the host add must wait for it, so it happens in
  // DrainOffloadedGrads. The device tensor may be freed now: the caching allocator reuses its
  // memory only for work queued after the copy.
  at::Tensor host =
      at::empty({reduced.numel()},
                at::TensorOptions().dtype(reduced.scalar_type()).pinned_memory(reduced.is_cuda()));
  host.copy_(reduced.reshape({-1}), /*non_blocking=*/true);
  offloaded_grads_.push_back(OffloadedGrad{unit, std::move(host)});
}

void FsdpEngine::DrainOffloadedGrads() {
  if (offloaded_grads_.empty()) return;
  WaitForOffloadCopies();
  at::NoGradGuard no_grad;
  // fp32 += reduce_dtype, element by element on the host: the same rounding as the device add
  // without offload.
  for (const OffloadedGrad& g : offloaded_grads_) units_[g.unit]->flat->shard_grad().add_(g.host);
  offloaded_grads_.clear();
}

void FsdpEngine::WaitForOffloadCopies() const {
  if (!options_.cpu_offload || !device_.is_cuda()) return;
  // Every copy is queued on the device's current stream, after the collectives it depends on:
  // an event recorded there now covers them all (called once per step, after backward). Not a
  // device-wide synchronize, and not unbounded: behind a collective stuck on a dead peer it
  // would never return. The communicators' watchdogs abort such a collective at its deadline
  // (which ends its kernels, so the copies run); after a communicator reports that error the
  // wait gives up past kDrainAfterCommError (the caller fails the step with the error).
  c10::OptionalDeviceGuard guard = DeviceScope();
  const c10::impl::DeviceGuardImplInterface* impl = c10::impl::getDeviceGuardImpl(device_.type());
  c10::Event copied(device_.type());
  copied.record(impl->getStream(device_));
  absl::Time give_up = absl::InfiniteFuture();
  while (!copied.query()) {
    if (give_up == absl::InfiniteFuture() && !CommAsyncError().ok()) {
      give_up = absl::Now() + kDrainAfterCommError;
    }
    if (absl::Now() > give_up) return;
    absl::SleepFor(kDrainPoll);
  }
}

absl::Status FsdpEngine::Backward(const at::Tensor& loss, bool sync_gradients) {
  if (!first_error_.ok()) return first_error_;
  if (!loss.defined() || !loss.requires_grad()) {
    return absl::InvalidArgumentError("Backward: loss does not require grad");
  }
  for (int u : root_units_) {
    if (!units_[u]->flat->full_allocated()) {
      return absl::FailedPreconditionError(
          absl::StrCat("Backward: unit ", units_[u]->flat->name(),
                       " is not gathered; call BeginForward() before the forward pass"));
    }
  }
  in_backward_ = true;
  sync_ = sync_gradients;
  if (!recording_order_.empty()) forward_order_ = recording_order_;
  for (auto& u : units_) {
    u->grads_ready = 0;
    u->post_backward_done = false;
  }
  {
    c10::OptionalDeviceGuard guard = DeviceScope();
    for (int u : root_units_) units_[u]->flat->AllocateFullGrad();
  }
  peaks_.Update(flats_);

  // A hook's StatusException comes back as the collective's status (common/torch_status.h).
  absl::Status status = TorchCall("backward", [&] { torch::autograd::backward({loss}); });
  if (!first_error_.ok()) status = first_error_;  // The collective's own error, not a wrapper.
  // Units whose gradients never all arrived (unused parameters), or that hold no_sync
  // gradients from earlier micro-batches: reduce now, in unit order (the same on every rank).
  for (size_t u = 0; status.ok() && u < units_.size(); ++u) {
    if (!units_[u]->post_backward_done && units_[u]->flat->full_grad_allocated()) {
      status = PostBackward(static_cast<int>(u));
    }
  }
  while (status.ok() && !pending_reduces_.empty()) status = FinishOldestReduce();
  if (!status.ok()) {
    for (PendingReduce& p : pending_reduces_) {  // Their memory is in use.
      if (p.handle != nullptr) (void)p.handle->Wait();
    }
    pending_reduces_.clear();
  }
  // cpu_offload: the gradient shards are complete on the host before the optimizer reads them.
  DrainOffloadedGrads();
  ReshardAll();
  checkpointer_.Clear();
  in_backward_ = false;
  // CUDA: a reduction whose Wait returned may have failed since (the watchdog's deadline).
  if (status.ok()) status = CommAsyncError();
  if (!status.ok()) return Fail(status);
  grads_pending_ = !sync_gradients;
  return absl::OkStatus();
}

void FsdpEngine::ZeroShardGrads() {
  at::NoGradGuard no_grad;
  for (auto& f : flats_) f->shard_grad().zero_();
}

void FsdpEngine::DropStepGradients() {
  for (PendingReduce& p : pending_reduces_) {  // Their memory is in use until they end.
    if (p.handle != nullptr) (void)p.handle->Wait();
  }
  pending_reduces_.clear();
  ReshardAll();  // Waits for prefetches in flight.
  pending_gathers_.clear();
  WaitForOffloadCopies();
  offloaded_grads_.clear();
  for (auto& f : flats_) f->FreeFullGrad();
  checkpointer_.Clear();
  for (auto& u : units_) {
    u->grads_ready = 0;
    u->post_backward_done = false;
  }
  recording_order_.clear();
  ZeroShardGrads();
  in_backward_ = false;
  sync_ = true;
  grads_pending_ = false;
}

}  // namespace shardline::fsdp
