#include "fsdp/fsdp_engine.h"

#include <algorithm>
#include <mutex>
#include <utility>

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/DeviceAccelerator.h>
#include <ATen/core/Generator.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/torch_status.h"

namespace shardline::fsdp {

struct FsdpEngine::Unit {
  FlatParam* flat = nullptr;
  int hook_group = -1;  // -1: root-gathered.
  int grads_expected = 0;
  int grads_ready = 0;              // This backward.
  bool post_backward_done = false;  // This backward.
};

namespace {

// Identity on the unit's output whose backward runs before the unit's own backward: there the
// engine re-gathers the unit's parameters (if freed) and prepares its flat gradient.
struct PreBackwardFunction : public torch::autograd::Function<PreBackwardFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, at::Tensor x, int64_t engine,
                            int64_t group) {
    ctx->saved_data["engine"] = engine;
    ctx->saved_data["group"] = group;
    return x.view_as(x);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* engine = reinterpret_cast<FsdpEngine*>(ctx->saved_data["engine"].toInt());
    engine->PreBackward(static_cast<int>(ctx->saved_data["group"].toInt()));
    return {grads[0], torch::autograd::Variable(), torch::autograd::Variable()};
  }
};

// Activation checkpointing: runs the unit's body without grad in forward (saving only the input)
// and recomputes it with grad in backward. `anchor` is an empty tensor that requires grad, so the
// output requires grad (and backward reaches this node) even when the input does not.
struct CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, at::Tensor input,
                            at::Tensor anchor, int64_t engine, int64_t call) {
    ctx->save_for_backward({input});
    ctx->saved_data["engine"] = engine;
    ctx->saved_data["call"] = call;
    ctx->saved_data["input_requires_grad"] = input.requires_grad();
    return reinterpret_cast<FsdpEngine*>(engine)->CheckpointForward(call, input);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* engine = reinterpret_cast<FsdpEngine*>(ctx->saved_data["engine"].toInt());
    at::Tensor dx =
        engine->CheckpointBackward(ctx->saved_data["call"].toInt(), ctx->get_saved_variables()[0],
                                   ctx->saved_data["input_requires_grad"].toBool(), grads[0]);
    return {dx, torch::autograd::Variable(), torch::autograd::Variable(),
            torch::autograd::Variable()};
  }
};

// Fires after AccumulateGrad added this backward's gradient into the parameter's .grad (a view
// into the unit's flat gradient).
class GradReadyHook : public torch::autograd::PostAccumulateGradHook {
 public:
  GradReadyHook(FsdpEngine* engine, int unit) : engine_(engine), unit_(unit) {}
  void operator()(const torch::autograd::Variable& /*param*/) override {
    engine_->OnParamGradReady(unit_);
  }

 private:
  FsdpEngine* engine_;
  int unit_;
};

bool Collective(const Communicator* c) { return c != nullptr && c->size() > 1; }

// Broadcast from rank 0 of `comm` in place, for any dtype (the communicator takes float32,
// float64 and int64; others travel as float64, exactly for bool and small integers).
absl::Status BroadcastAny(Communicator* comm, const at::Tensor& t) {
  if (!Collective(comm) || t.numel() == 0) return absl::OkStatus();
  const auto dtype = t.scalar_type();
  at::Tensor buf = (dtype == at::kFloat || dtype == at::kDouble || dtype == at::kLong)
                       ? t.detach().contiguous().clone()
                       : t.detach().to(at::kDouble).contiguous();
  RETURN_IF_ERROR(comm->Broadcast(buf, 0));
  at::NoGradGuard no_grad;
  t.detach().copy_(buf.to(dtype).view(t.sizes()));
  return absl::OkStatus();
}

}  // namespace

FsdpEngine::FsdpEngine(std::shared_ptr<torch::nn::Module> model, const EngineLayout& layout,
                       Communicator* shard, Communicator* replicate,
                       const FsdpEngineOptions& options)
    : model_(std::move(model)),
      layout_(layout),
      shard_(shard),
      replicate_(replicate),
      options_(options) {}

FsdpEngine::~FsdpEngine() {
  for (auto& [unit, pending] : pending_gathers_) (void)pending.handle->Wait();
  for (PendingReduce& p : pending_reduces_) (void)p.handle->Wait();
  // Leave the model usable: drop hooks that point at this engine.
  for (auto& flat : flats_) {
    for (const FlatParamEntry& e : flat->entries()) {
      torch::autograd::impl::set_post_acc_grad_hooks(e.param, nullptr);
    }
  }
}

absl::StatusOr<std::unique_ptr<FsdpEngine>> FsdpEngine::Create(
    std::shared_ptr<torch::nn::Module> model, const EngineLayout& layout, Communicator* shard,
    Communicator* replicate, const FsdpEngineOptions& options) {
  if (model == nullptr) return absl::InvalidArgumentError("FsdpEngine: model is null");
  const int s = layout.shard_degree;
  const int r = layout.replicate_degree;
  if (s < 1 || r < 1 || s * r != layout.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("FsdpEngine: layout world_size ",
                                                   layout.world_size, " != replicate degree ", r,
                                                   " x shard degree ", s));
  }
  if (options.rank < 0 || options.rank >= layout.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("FsdpEngine: rank ", options.rank, " outside world_size ", layout.world_size));
  }
  const int shard_size = shard == nullptr ? 1 : shard->size();
  const int replicate_size = replicate == nullptr ? 1 : replicate->size();
  if (shard_size != s) {
    return absl::InvalidArgumentError(
        absl::StrCat("FsdpEngine: shard communicator has ", shard_size, " ranks but layout ",
                     layout.DebugString(), " needs shard degree S=", s));
  }
  if (replicate_size != r) {
    return absl::InvalidArgumentError(
        absl::StrCat("FsdpEngine: replicate communicator has ", replicate_size,
                     " ranks but layout ", layout.DebugString(), " needs replicate degree R=", r));
  }
  if (shard != nullptr && shard->rank() != layout.ShardIndex(options.rank)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "FsdpEngine: shard communicator rank ", shard->rank(), " but global rank ", options.rank,
        " is shard index ", layout.ShardIndex(options.rank), " in ", layout.DebugString()));
  }
  if (replicate != nullptr && replicate->rank() != layout.ReplicateIndex(options.rank)) {
    return absl::InvalidArgumentError(
        absl::StrCat("FsdpEngine: replicate communicator rank ", replicate->rank(),
                     " but global rank ", options.rank, " is replicate index ",
                     layout.ReplicateIndex(options.rank), " in ", layout.DebugString()));
  }
  auto engine =
      std::unique_ptr<FsdpEngine>(new FsdpEngine(model, layout, shard, replicate, options));
  RETURN_IF_ERROR(engine->Init());
  return engine;
}

absl::Status FsdpEngine::SyncModuleStates() {
  // Shard group first (from its rank 0), then replicate group (from its rank 0): global rank 0's
  // values reach everybody.
  for (Communicator* comm : {shard_, replicate_}) {
    for (const auto& p : model_->parameters(/*recurse=*/true)) {
      RETURN_IF_ERROR(BroadcastAny(comm, p));
    }
    for (const auto& b : model_->buffers(/*recurse=*/true)) {
      RETURN_IF_ERROR(BroadcastAny(comm, b));
    }
  }
  return absl::OkStatus();
}

absl::Status FsdpEngine::Init() {
  std::vector<std::string> hook_paths;
  ASSIGN_OR_RETURN(std::vector<UnitPlan> plans,
                   PlanUnits(*model_, options_.wrap_policy, &hook_paths));
  if (options_.sync_module_states) RETURN_IF_ERROR(SyncModuleStates());
  for (at::ScalarType t : {options_.param_dtype, options_.reduce_dtype, options_.buffer_dtype}) {
    if (t != at::kFloat && t != at::kBFloat16 && t != at::kHalf) {
      return absl::InvalidArgumentError(absl::StrCat("FsdpEngine: mixed precision dtype ",
                                                     c10::toString(t),
                                                     " is not one of float32, bfloat16, float16"));
    }
  }
  if (options_.buffer_dtype != at::kFloat) {
    at::NoGradGuard no_grad;
    for (auto& b : model_->buffers(/*recurse=*/true)) {
      if (b.is_floating_point()) b.set_data(b.to(options_.buffer_dtype));
    }
  }

  // Hook groups in module order; map the hook modules' addresses.
  std::map<std::string, int> group_of_path;
  std::map<std::string, const torch::nn::Module*> module_at;
  for (const auto& item : model_->named_modules("", /*include_self=*/false)) {
    module_at[item.key()] = item.value().get();
  }
  const int shard_rank = shard_ == nullptr ? 0 : shard_->rank();
  const int s = layout_.shard_degree;
  for (UnitPlan& plan : plans) {
    std::vector<FlatParamEntry> entries;
    for (UnitPlanParam& p : plan.params) {
      FlatParamEntry e;
      e.name = p.name;
      e.aliases = p.aliases;
      e.param = p.param;
      entries.push_back(std::move(e));
    }
    absl::StatusOr<std::unique_ptr<FlatParam>> flat;
    RETURN_IF_ERROR(TorchCall("build flat parameter", [&] {
      flat = FlatParam::Create(plan.name, entries, shard_rank, s, options_.param_dtype,
                               options_.cpu_offload);
    }));
    if (!flat.ok()) return flat.status();
    auto unit = std::make_unique<Unit>();
    unit->flat = flat->get();
    for (const FlatParamEntry& e : unit->flat->entries()) {
      if (e.param.requires_grad()) ++unit->grads_expected;
    }
    const int index = static_cast<int>(units_.size());
    if (plan.hook_path.empty()) {
      root_units_.push_back(index);
    } else {
      auto it = group_of_path.find(plan.hook_path);
      if (it == group_of_path.end()) {
        it = group_of_path.emplace(plan.hook_path, static_cast<int>(hook_groups_.size())).first;
        hook_groups_.emplace_back();
        hook_index_[module_at[plan.hook_path]] = it->second;
      }
      hook_groups_[it->second].push_back(index);
      unit->hook_group = it->second;
    }
    for (const FlatParamEntry& e : unit->flat->entries()) {
      if (e.param.requires_grad()) {
        torch::autograd::impl::set_post_acc_grad_hooks(
            e.param, std::make_unique<GradReadyHook>(this, index));
      }
    }
    flats_.push_back(std::move(*flat));
    units_.push_back(std::move(unit));
  }
  if (!flats_.empty()) device_ = flats_[0]->device();
  return absl::OkStatus();
}

void FsdpEngine::set_step(int64_t step) {
  if (shard_ != nullptr) shard_->set_step(step);
  if (replicate_ != nullptr) replicate_->set_step(step);
}

absl::Status FsdpEngine::Fail(absl::Status s) {
  if (first_error_.ok()) first_error_ = s;
  return s;
}

void FsdpEngine::UpdatePeaks() {
  int64_t gathered = 0, grads = 0;
  for (const auto& f : flats_) {
    gathered += f->full_bytes();
    grads += f->full_grad_bytes();
  }
  peak_gathered_ = std::max(peak_gathered_, gathered);
  peak_unsharded_grad_ = std::max(peak_unsharded_grad_, grads);
  peak_gathered_groups_ =
      std::max(peak_gathered_groups_, static_cast<int>(gathered_groups_.size()));
}

void FsdpEngine::MarkGathered(int unit) {
  if (units_[unit]->hook_group >= 0) gathered_groups_.insert(units_[unit]->hook_group);
}

absl::Status FsdpEngine::WaitPending(int unit) {
  auto it = pending_gathers_.find(unit);
  if (it == pending_gathers_.end()) return absl::OkStatus();
  absl::Status s = it->second.handle->Wait();
  pending_gathers_.erase(it);
  if (!s.ok()) return Fail(s);
  return absl::OkStatus();
}

void FsdpEngine::PrefetchGroup(int group) {
  bool needed = false;
  for (int u : hook_groups_[group]) needed = needed || !units_[u]->flat->full_allocated();
  if (!needed) return;  // Gathered, kept, in flight, or S == 1.
  if (options_.limit_all_gathers && gathered_groups_.size() >= 2 &&
      gathered_groups_.count(group) == 0) {
    ++prefetches_skipped_;
    return;
  }
  for (int u : hook_groups_[group]) {
    if (units_[u]->flat->full_allocated()) continue;
    absl::Status s = StartGather(u, /*async=*/true);
    if (!s.ok()) return;  // Recorded; the demand gather reports it.
  }
  UpdatePeaks();
}

void FsdpEngine::PrefetchNeighbour(int group, int direction) {
  for (size_t i = 0; i < forward_order_.size(); ++i) {
    if (forward_order_[i] != group) continue;
    const int j = static_cast<int>(i) + direction;
    if (j >= 0 && j < static_cast<int>(forward_order_.size())) PrefetchGroup(forward_order_[j]);
    return;
  }
}

absl::Status FsdpEngine::Gather(int unit) {
  FlatParam* flat = units_[unit]->flat;
  if (pending_gathers_.count(unit)) return WaitPending(unit);
  if (flat->full_allocated()) return absl::OkStatus();  // Kept, or S == 1.
  return StartGather(unit, /*async=*/false);
}

absl::Status FsdpEngine::StartGather(int unit, bool async) {
  FlatParam* flat = units_[unit]->flat;
  flat->AllocateFull();
  MarkGathered(unit);
  UpdatePeaks();
  at::NoGradGuard no_grad;
  at::Tensor src;
  if (flat->offloaded()) {
    // CPU offload: host->device copy (cast on the device when dtypes differ), asynchronous from
    // the pinned shard; the gather below is ordered after it on the device. With S == 1 the
    // copy goes straight into the full buffer.
    if (flat->shard_count() == 1) {
      flat->full().copy_(flat->shard(), /*non_blocking=*/true);
      return absl::OkStatus();
    }
    src = at::empty({flat->shard_numel()}, flat->full().options());
    src.copy_(flat->shard(), /*non_blocking=*/true);
  } else {
    // Mixed precision: gather the shard cast to the compute dtype (half the bytes for bf16/fp16).
    src = flat->mixed() ? flat->shard().to(flat->compute_dtype()) : flat->shard();
    if (flat->shard_count() == 1) {  // Mixed precision with S == 1: a local cast copy.
      flat->full().copy_(src);
      return absl::OkStatus();
    }
  }
  if (async) {
    PendingGather p;
    p.handle = shard_->AllGatherAsync(src, flat->full());
    p.src = std::move(src);
    pending_gathers_[unit] = std::move(p);
    return absl::OkStatus();
  }
  absl::Status s = shard_->AllGather(src, flat->full());
  if (!s.ok()) return Fail(s);
  return absl::OkStatus();
}

at::Tensor FsdpEngine::ReduceSource(const FlatParam& flat) const {
  const at::Tensor& g = flat.full_grad();
  return g.scalar_type() == options_.reduce_dtype ? g : g.to(options_.reduce_dtype);
}

void FsdpEngine::Free(int unit) {
  // Never release memory a collective is still writing into.
  if (pending_gathers_.count(unit)) (void)WaitPending(unit);
  units_[unit]->flat->FreeFull();
  const int group = units_[unit]->hook_group;
  if (group < 0 || gathered_groups_.count(group) == 0) return;
  for (int u : hook_groups_[group]) {
    if (units_[u]->flat->full_allocated() && !units_[u]->flat->full_is_shard()) return;
  }
  gathered_groups_.erase(group);
}

void FsdpEngine::ReshardAll() {
  for (size_t u = 0; u < units_.size(); ++u) Free(static_cast<int>(u));
}

absl::Status FsdpEngine::BeginForward() {
  if (!first_error_.ok()) return first_error_;
  if (in_backward_) return absl::FailedPreconditionError("BeginForward called inside Backward");
  if (!recording_order_.empty()) forward_order_ = std::move(recording_order_);
  recording_order_.clear();
  for (int u : root_units_) RETURN_IF_ERROR(Gather(u));
  return absl::OkStatus();
}

at::Tensor FsdpEngine::Run(const torch::nn::Module& module, const at::Tensor& input,
                           const UnitBody& body) {
  if (!first_error_.ok()) throw CommError(first_error_);
  auto it = hook_index_.find(&module);
  if (it == hook_index_.end()) return body(input);  // Its parameters belong to root units.
  const int group = it->second;
  recording_order_.push_back(group);
  for (int u : hook_groups_[group]) {
    absl::Status s = Gather(u);
    if (!s.ok()) throw CommError(s);
  }
  if (options_.forward_prefetch) PrefetchNeighbour(group, +1);
  at::Tensor out;
  if (options_.activation_checkpointing && at::GradMode::is_enabled()) {
    CheckpointedCall call;
    call.body = body;
    at::Generator gen = at::globalContext().defaultGenerator(input.device());
    {
      std::lock_guard<std::mutex> lock(gen.mutex());
      call.rng_state = gen.get_state();
    }
    checkpointed_.push_back(std::move(call));
    out = CheckpointFunction::apply(input, at::empty({0}, input.options()).requires_grad_(true),
                                    reinterpret_cast<int64_t>(this),
                                    static_cast<int64_t>(checkpointed_.size() - 1));
  } else {
    out = body(input);
  }
  const bool needs_backward = at::GradMode::is_enabled() && out.requires_grad();
  if (needs_backward) {
    out = PreBackwardFunction::apply(out, reinterpret_cast<int64_t>(this),
                                     static_cast<int64_t>(group));
  }
  if (layout_.reshard_after_forward || !needs_backward) {
    for (int u : hook_groups_[group]) Free(u);
  } else {
    gathered_groups_.erase(group);  // Kept by the strategy: not in flight for the limiter.
  }
  return out;
}

void FsdpEngine::PreBackward(int group) {
  for (int u : hook_groups_[group]) {
    absl::Status s = Gather(u);
    if (!s.ok()) throw CommError(s);
    units_[u]->flat->AllocateFullGrad();
  }
  UpdatePeaks();
  if (options_.backward_prefetch == FsdpEngineOptions::BackwardPrefetch::kPre) {
    PrefetchNeighbour(group, -1);
  }
}

at::Tensor FsdpEngine::CheckpointForward(int64_t call, const at::Tensor& input) {
  at::NoGradGuard no_grad;
  return checkpointed_.at(call).body(input);
}

at::Tensor FsdpEngine::CheckpointBackward(int64_t call, const at::Tensor& input,
                                          bool input_requires_grad, const at::Tensor& grad) {
  if (!grad.defined()) return at::Tensor();
  const CheckpointedCall& c = checkpointed_.at(call);
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

void FsdpEngine::OnParamGradReady(int unit) {
  Unit& u = *units_[unit];
  ++u.grads_ready;
  if (u.grads_ready == u.grads_expected) {
    absl::Status s = PostBackward(unit);
    if (!s.ok()) throw CommError(s);
  }
}

absl::Status FsdpEngine::ReduceGrad(int unit) {
  FlatParam* flat = units_[unit]->flat;
  at::NoGradGuard no_grad;
  at::Tensor src = ReduceSource(*flat);
  at::Tensor reduced;
  if (flat->shard_count() == 1) {
    reduced = src;  // S == 1: no reduce-scatter.
  } else {
    reduced = at::empty({flat->shard_numel()}, src.options());
    // The flat gradient is dropped after this (FreeFullGrad): the communicator may reduce in it.
    absl::Status s = shard_->ReduceScatterConsuming(src, reduced, ReduceOp::kAvg);
    if (!s.ok()) return Fail(s);
  }
  if (Collective(replicate_)) {
    absl::Status s = replicate_->AllReduce(reduced, ReduceOp::kAvg);
    if (!s.ok()) return Fail(s);
  }
  AccumulateShardGrad(unit, reduced);
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
  // Every copy is queued on the device's current stream, after the collectives it depends on;
  // a device-wide synchronize covers them all (called once per step, after backward).
  at::accelerator::synchronizeDevice(device_.index());
}

absl::Status FsdpEngine::StartReduce(int unit) {
  FlatParam* flat = units_[unit]->flat;
  at::NoGradGuard no_grad;
  PendingReduce p;
  p.unit = unit;
  p.src = ReduceSource(*flat);
  if (flat->shard_count() == 1) {
    p.reduced = p.src;
    p.handle = replicate_->AllReduceAsync(p.reduced, ReduceOp::kAvg);
  } else {
    p.reduced = at::empty({flat->shard_numel()}, p.src.options());
    // p.src (the flat gradient or its cast) is dropped once reduced: it may be reduced in.
    p.handle = shard_->ReduceScatterConsumingAsync(p.src, p.reduced, ReduceOp::kAvg);
  }
  pending_reduces_.push_back(std::move(p));
  while (pending_reduces_.size() > 2) RETURN_IF_ERROR(FinishOldestReduce());
  return absl::OkStatus();
}

absl::Status FsdpEngine::FinishOldestReduce() {
  PendingReduce p = std::move(pending_reduces_.front());
  pending_reduces_.erase(pending_reduces_.begin());
  absl::Status s = p.handle->Wait();
  if (!s.ok()) return Fail(s);
  FlatParam* flat = units_[p.unit]->flat;
  at::NoGradGuard no_grad;
  if (flat->shard_count() > 1 && Collective(replicate_)) {
    s = replicate_->AllReduce(p.reduced, ReduceOp::kAvg);
    if (!s.ok()) return Fail(s);
  }
  AccumulateShardGrad(p.unit, p.reduced);
  flat->FreeFullGrad();
  return absl::OkStatus();
}

absl::Status FsdpEngine::PostBackward(int unit) {
  Unit& u = *units_[unit];
  if (u.post_backward_done) return absl::OkStatus();
  u.post_backward_done = true;
  if (sync_ && u.flat->full_grad_allocated()) {
    const bool async =
        options_.overlap_reduce && (u.flat->shard_count() > 1 || Collective(replicate_));
    if (async) {
      RETURN_IF_ERROR(StartReduce(unit));
    } else {
      RETURN_IF_ERROR(ReduceGrad(unit));
      u.flat->FreeFullGrad();
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
  for (int u : root_units_) units_[u]->flat->AllocateFullGrad();
  UpdatePeaks();

  absl::Status status;
  try {
    torch::autograd::backward({loss});
  } catch (const CommError& e) {
    status = e.status();
  } catch (...) {
    status = StatusFromCurrentTorchException("backward");
  }
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
    for (PendingReduce& p : pending_reduces_) (void)p.handle->Wait();  // Memory in use.
    pending_reduces_.clear();
  }
  // cpu_offload: the gradient shards are complete on the host before the optimizer reads them.
  DrainOffloadedGrads();
  ReshardAll();
  checkpointed_.clear();
  in_backward_ = false;
  if (!status.ok()) return Fail(status);
  grads_pending_ = !sync_gradients;
  return absl::OkStatus();
}

void FsdpEngine::ZeroShardGrads() {
  at::NoGradGuard no_grad;
  for (auto& f : flats_) f->shard_grad().zero_();
}

MemoryStats FsdpEngine::memory_stats() const {
  MemoryStats m;
  for (const auto& f : flats_) {
    m.param_shard_bytes += f->shard_bytes();
    m.grad_shard_bytes += f->shard_grad_bytes();
    (f->offloaded() ? m.host_offloaded_shard_bytes : m.device_shard_bytes) +=
        f->shard_bytes() + f->shard_grad_bytes();
    m.padding_bytes += (f->shard_numel() - f->valid_shard_numel()) * 4;
    m.gathered_param_bytes += f->full_bytes();
    m.unsharded_grad_bytes += f->full_grad_bytes();
    m.num_params += f->numel();
  }
  m.peak_gathered_param_bytes = peak_gathered_;
  m.peak_unsharded_grad_bytes = peak_unsharded_grad_;
  return m;
}

std::vector<ShardSlice> FsdpEngine::LocalParamState() const {
  WaitForOffloadCopies();  // The caller may write into the views (checkpoint load).
  std::vector<ShardSlice> out;
  for (const auto& f : flats_) {
    for (size_t i = 0; i < f->entries().size(); ++i) {
      const FlatParamEntry& e = f->entries()[i];
      FlatParam::LocalRange r = f->LocalRangeOf(i);
      ShardSlice s;
      s.name = e.name;
      s.global_shape = e.shape;
      s.start = r.start;
      s.end = r.end;
      s.local = f->shard().narrow(0, r.shard_offset, r.end - r.start);
      out.push_back(std::move(s));
    }
  }
  return out;
}

absl::StatusOr<std::vector<std::pair<std::string, at::Tensor>>> FsdpEngine::FullParamState(
    bool rank0_only) {
  if (!first_error_.ok()) return first_error_;
  const bool keep = !rank0_only || options_.rank == 0;
  std::vector<std::pair<std::string, at::Tensor>> out;
  at::NoGradGuard no_grad;
  for (const auto& f : flats_) {
    at::Tensor full;
    if (f->shard_count() == 1) {
      full = f->shard();
    } else {
      // With cpu_offload the host shard travels through the device (the communicator's), and
      // the gathered unit comes back to the host: one unit's full size on the device at a time.
      const at::Tensor src = f->shard().to(device_);
      full = at::empty({f->padded_numel()}, src.options());
      absl::Status s = shard_->AllGather(src, full);
      if (!s.ok()) return Fail(s);
      if (f->offloaded()) full = full.to(at::kCPU);
    }
    if (!keep) continue;
    for (const FlatParamEntry& e : f->entries()) {
      out.emplace_back(e.name, full.narrow(0, e.offset, e.numel).view(e.shape).clone());
    }
  }
  return out;
}

absl::Status FsdpEngine::LoadFullParamState(const std::map<std::string, at::Tensor>& state) {
  ReshardAll();            // Gathered copies would be stale.
  WaitForOffloadCopies();  // A host->device copy may still read the host shards.
  at::NoGradGuard no_grad;
  for (const auto& f : flats_) {
    for (size_t i = 0; i < f->entries().size(); ++i) {
      const FlatParamEntry& e = f->entries()[i];
      auto it = state.find(e.name);
      for (size_t a = 0; it == state.end() && a < e.aliases.size(); ++a) {
        it = state.find(e.aliases[a]);
      }
      if (it == state.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("LoadFullParamState: parameter ", e.name, " missing"));
      }
      if (it->second.sizes().vec() != e.shape) {
        return absl::InvalidArgumentError(absl::StrCat(
            "LoadFullParamState: parameter ", e.name, " has shape ", c10::str(it->second.sizes()),
            ", model has ", c10::str(at::IntArrayRef(e.shape))));
      }
      FlatParam::LocalRange r = f->LocalRangeOf(i);
      if (r.end == r.start) continue;
      f->shard()
          .narrow(0, r.shard_offset, r.end - r.start)
          .copy_(it->second.reshape({-1}).narrow(0, r.start, r.end - r.start));
    }
  }
  return absl::OkStatus();
}

std::map<std::string, std::string> FsdpEngine::aliases() const {
  std::map<std::string, std::string> out;
  for (const auto& f : flats_) {
    for (const FlatParamEntry& e : f->entries()) {
      for (const std::string& a : e.aliases) out[a] = e.name;
    }
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> FsdpEngine::UnitSummary() const {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& u : units_) {
    out.emplace_back(u->flat->name(), u->hook_group < 0
                                          ? std::string("<root-gathered>")
                                          : absl::StrCat("hook group ", u->hook_group));
  }
  return out;
}

}  // namespace shardline::fsdp
