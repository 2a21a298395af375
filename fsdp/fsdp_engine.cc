#include "fsdp/fsdp_engine.h"

#include <algorithm>
#include <utility>

#include <ATen/ATen.h>
#include <ATen/DeviceAccelerator.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "common/torch_status.h"

namespace shardline::fsdp {

namespace internal {

// The only callers of the engine's hook entry points.
struct EngineHooks {
  static void PreBackward(FsdpEngine* engine, int group) { engine->PreBackward(group); }
  static void GradReady(FsdpEngine* engine, int unit) { engine->OnParamGradReady(unit); }
};

}  // namespace internal

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
    internal::EngineHooks::PreBackward(
        reinterpret_cast<FsdpEngine*>(ctx->saved_data["engine"].toInt()),
        static_cast<int>(ctx->saved_data["group"].toInt()));
    return {grads[0], torch::autograd::Variable(), torch::autograd::Variable()};
  }
};

// Fires after AccumulateGrad added this backward's gradient into the parameter's .grad (a view
// into the unit's flat gradient).
class GradReadyHook : public torch::autograd::PostAccumulateGradHook {
 public:
  GradReadyHook(FsdpEngine* engine, int unit) : engine_(engine), unit_(unit) {}
  void operator()(const torch::autograd::Variable& /*param*/) override {
    internal::EngineHooks::GradReady(engine_, unit_);
  }

 private:
  FsdpEngine* engine_;
  int unit_;
};

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

at::ScalarType ToScalarType(Dtype dtype) {
  switch (dtype) {
    case Dtype::kBFloat16:
      return at::kBFloat16;
    case Dtype::kFloat16:
      return at::kHalf;
    case Dtype::kFloat32:
      break;
  }
  return at::kFloat;
}

FsdpEngine::FsdpEngine(std::shared_ptr<torch::nn::Module> model, const ParallelLayout& layout,
                       Communicator* shard, Communicator* replicate,
                       const FsdpEngineOptions& options)
    : model_(std::move(model)),
      layout_(layout),
      shard_(shard),
      replicate_(replicate),
      options_(options),
      limiter_(options.limit_all_gathers) {}

FsdpEngine::~FsdpEngine() {
  for (auto& [unit, pending] : pending_gathers_) (void)pending.handle->Wait();
  for (PendingReduce& p : pending_reduces_) {
    if (p.handle != nullptr) (void)p.handle->Wait();
  }
  // Leave the model usable: drop hooks that point at this engine.
  for (auto& flat : flats_) {
    for (const FlatParamEntry& e : flat->entries()) {
      torch::autograd::impl::set_post_acc_grad_hooks(e.param, nullptr);
    }
  }
}

absl::StatusOr<std::unique_ptr<FsdpEngine>> FsdpEngine::Create(
    std::shared_ptr<torch::nn::Module> model, const ParallelLayout& layout, Communicator* shard,
    Communicator* replicate, const FsdpEngineOptions& options, const DeferredInit* deferred) {
  if (model == nullptr) return absl::InvalidArgumentError("FsdpEngine: model is null");
  const int s = layout.shard_degree();  // ParallelLayout guarantees W = R x S.
  const int r = layout.replicate_degree();
  if (options.rank < 0 || options.rank >= layout.world_size()) {
    return absl::InvalidArgumentError(absl::StrCat("FsdpEngine: rank ", options.rank,
                                                   " outside world_size ", layout.world_size()));
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
  RETURN_IF_ERROR(engine->Init(deferred));
  return engine;
}

absl::Status FsdpEngine::SyncModuleStates(bool sharded) {
  if (sharded) {
    // Each rank built its own shards; the ranks holding the same shard form a replicate group.
    // An offloaded (host) shard travels through the device, where the communicator works.
    for (const auto& flat : flats_) {
      if (!Collective(replicate_)) break;
      if (!flat->offloaded()) {
        RETURN_IF_ERROR(BroadcastAny(replicate_, flat->shard()));
        continue;
      }
      at::Tensor on_device = flat->shard().to(flat->device());
      RETURN_IF_ERROR(BroadcastAny(replicate_, on_device));
      flat->shard().copy_(on_device);
    }
  }
  // Shard group first (from its rank 0), then replicate group (from its rank 0): global rank 0's
  // values reach everybody.
  for (Communicator* comm : {shard_, replicate_}) {
    for (const auto& p : model_->parameters(/*recurse=*/true)) {
      if (sharded) break;
      RETURN_IF_ERROR(BroadcastAny(comm, p));
    }
    for (const auto& b : model_->buffers(/*recurse=*/true)) {
      RETURN_IF_ERROR(BroadcastAny(comm, b));
    }
  }
  return absl::OkStatus();
}

c10::Stream FsdpEngine::ReplicateStream() {
  if (!replicate_stream_.has_value()) {
    replicate_stream_ =
        c10::impl::getDeviceGuardImpl(device_.type())->getStreamFromGlobalPool(device_);
  }
  return *replicate_stream_;
}

absl::Status FsdpEngine::Init(const DeferredInit* deferred) {
  std::vector<std::string> hook_paths;
  ASSIGN_OR_RETURN(std::vector<UnitPlan> plans,
                   PlanUnits(*model_, options_.wrap_policy, &hook_paths));
  if (deferred != nullptr && deferred->values == nullptr) {
    return absl::InvalidArgumentError("FsdpEngine: DeferredInit without an initializer");
  }
  // With sharded initialization the parameters have nothing to broadcast until the shards exist.
  if (options_.sync_module_states && deferred == nullptr) RETURN_IF_ERROR(SyncModuleStates(false));
  if (options_.buffer_dtype != Dtype::kFloat32) {
    at::NoGradGuard no_grad;
    const at::ScalarType buffer_dtype = ToScalarType(options_.buffer_dtype);
    for (auto& b : model_->buffers(/*recurse=*/true)) {
      if (b.is_floating_point()) b.set_data(b.to(buffer_dtype));
    }
  }
  // Hook groups in module order, keyed by the hook modules' addresses.
  std::map<std::string, const torch::nn::Module*> module_at;
  for (const auto& item : model_->named_modules("", /*include_self=*/false)) {
    module_at[item.key()] = item.value().get();
  }
  std::map<std::string, int> group_of_path;
  for (UnitPlan& plan : plans) {
    int group = -1;  // Root-gathered.
    if (!plan.hook_path.empty()) {
      auto it = group_of_path.find(plan.hook_path);
      if (it == group_of_path.end()) {
        it = group_of_path.emplace(plan.hook_path, static_cast<int>(hook_groups_.size())).first;
        hook_groups_.emplace_back();
        hook_index_[module_at[plan.hook_path]] = it->second;
      }
      group = it->second;
    }
    RETURN_IF_ERROR(AddUnit(plan, group, deferred));
  }
  if (deferred != nullptr) {
    RETURN_IF_ERROR(InitShards(flats_, *deferred->values));
    if (options_.sync_module_states) RETURN_IF_ERROR(SyncModuleStates(true));
  }
  if (!flats_.empty()) device_ = flats_[0]->device();
  return absl::OkStatus();
}

absl::Status FsdpEngine::AddUnit(const UnitPlan& plan, int hook_group,
                                 const DeferredInit* deferred) {
  std::vector<FlatParamEntry> entries;
  for (const UnitPlanParam& p : plan.params) {
    FlatParamEntry e;
    e.name = p.name;
    e.aliases = p.aliases;
    e.param = p.param;
    entries.push_back(std::move(e));
  }
  absl::StatusOr<std::unique_ptr<FlatParam>> flat;
  RETURN_IF_ERROR(TorchCall("build flat parameter", [&] {
    const int shard_rank = shard_ == nullptr ? 0 : shard_->rank();
    flat = deferred == nullptr
               ? FlatParam::Create(plan.name, entries, shard_rank, layout_.shard_degree(),
                                   ToScalarType(options_.param_dtype), options_.cpu_offload)
               : FlatParam::CreateUninitialized(
                     plan.name, entries, deferred->device, shard_rank, layout_.shard_degree(),
                     ToScalarType(options_.param_dtype), options_.cpu_offload);
  }));
  if (!flat.ok()) return flat.status();
  auto unit = std::make_unique<Unit>();
  unit->flat = flat->get();
  unit->hook_group = hook_group;
  const int index = static_cast<int>(units_.size());
  if (hook_group < 0) {
    root_units_.push_back(index);
  } else {
    hook_groups_[hook_group].push_back(index);
  }
  for (const FlatParamEntry& e : unit->flat->entries()) {
    if (!e.param.requires_grad()) continue;
    ++unit->grads_expected;
    torch::autograd::impl::set_post_acc_grad_hooks(e.param,
                                                   std::make_unique<GradReadyHook>(this, index));
  }
  flats_.push_back(std::move(*flat));
  units_.push_back(std::move(unit));
  return absl::OkStatus();
}

void FsdpEngine::set_step(int64_t step) {
  if (shard_ != nullptr) shard_->set_step(step);
  if (replicate_ != nullptr) replicate_->set_step(step);
}

c10::OptionalDeviceGuard FsdpEngine::DeviceScope() const {
  // Allocations made without an explicit device (the flat buffers' caching-allocator blocks)
  // come from the current device: make it the model's, whatever thread calls.
  return c10::OptionalDeviceGuard(device_.is_cpu() ? std::nullopt
                                                   : std::optional<at::Device>(device_));
}

absl::Status FsdpEngine::CommAsyncError() const {
  for (const Communicator* c : {shard_, replicate_}) {
    if (c == nullptr) continue;
    if (absl::Status s = c->AsyncError(); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status FsdpEngine::Fail(absl::Status s) {
  // CUDA: after a watchdog abort the first failure this engine sees may be a later call's
  // FAILED_PRECONDITION ("broken by an earlier error"); the communicator's own first error
  // (DEADLINE_EXCEEDED or UNAVAILABLE, naming the collective that failed) is the one to report.
  // Always OK on the CPU backends, whose Wait returns the error itself.
  if (absl::Status cause = CommAsyncError(); !cause.ok()) s = cause;
  if (first_error_.ok()) first_error_ = s;
  return s;
}

// ---- Gather schedule -------------------------------------------------------------------------

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
  if (!limiter_.AllowPrefetch(group)) return;
  for (int u : hook_groups_[group]) {
    if (units_[u]->flat->full_allocated()) continue;
    absl::Status s = StartGather(u, /*async=*/true);
    if (!s.ok()) return;  // Recorded; the demand gather reports it.
  }
  peaks_.Update(flats_);
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
  c10::OptionalDeviceGuard guard = DeviceScope();
  flat->AllocateFull();
  if (units_[unit]->hook_group >= 0) limiter_.MarkGathered(units_[unit]->hook_group);
  peaks_.Update(flats_);
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
  // On CUDA the handle's Wait orders the current stream after the gather without blocking the
  // host (the communicator's watchdog enforces the deadline); src's memory is recorded on the
  // communication stream, so dropping it here is safe. Elsewhere the synchronous form.
  absl::Status s = device_.is_cuda() ? shard_->AllGatherAsync(src, flat->full())->Wait()
                                     : shard_->AllGather(src, flat->full());
  if (!s.ok()) return Fail(s);
  return absl::OkStatus();
}

void FsdpEngine::Free(int unit) {
  // Never release memory a collective is still writing into.
  if (pending_gathers_.count(unit)) (void)WaitPending(unit);
  units_[unit]->flat->FreeFull();
  const int group = units_[unit]->hook_group;
  if (group < 0 || !limiter_.IsGathered(group)) return;
  for (int u : hook_groups_[group]) {
    if (units_[u]->flat->full_allocated() && !units_[u]->flat->full_is_shard()) return;
  }
  limiter_.MarkReleased(group);
}

void FsdpEngine::ReshardAll() {
  for (size_t u = 0; u < units_.size(); ++u) Free(static_cast<int>(u));
}

// ---- Forward ---------------------------------------------------------------------------------

absl::Status FsdpEngine::BeginForward() {
  if (!first_error_.ok()) return first_error_;
  // A collective of the last step that failed after its Wait returned (CUDA: the watchdog).
  if (absl::Status s = CommAsyncError(); !s.ok()) return Fail(s);
  if (in_backward_) return absl::FailedPreconditionError("BeginForward called inside Backward");
  if (!recording_order_.empty()) forward_order_ = std::move(recording_order_);
  recording_order_.clear();
  for (int u : root_units_) RETURN_IF_ERROR(Gather(u));
  return absl::OkStatus();
}

at::Tensor FsdpEngine::Run(const torch::nn::Module& module, const at::Tensor& input,
                           const UnitBody& body) {
  if (!first_error_.ok()) throw StatusException(first_error_);
  auto it = hook_index_.find(&module);
  if (it == hook_index_.end()) return body(input);  // Its parameters belong to root units.
  const int group = it->second;
  recording_order_.push_back(group);
  for (int u : hook_groups_[group]) {
    absl::Status s = Gather(u);
    if (!s.ok()) throw StatusException(s);
  }
  if (options_.forward_prefetch) PrefetchNeighbour(group, +1);
  at::Tensor out = options_.activation_checkpointing && at::GradMode::is_enabled()
                       ? checkpointer_.Run(body, input)
                       : body(input);
  const bool needs_backward = at::GradMode::is_enabled() && out.requires_grad();
  if (needs_backward) {
    out = PreBackwardFunction::apply(out, reinterpret_cast<int64_t>(this),
                                     static_cast<int64_t>(group));
  }
  if (layout_.reshard_after_forward() || !needs_backward) {
    for (int u : hook_groups_[group]) Free(u);
  } else {
    limiter_.MarkReleased(group);  // Kept by the strategy: not in flight for the limiter.
  }
  return out;
}

absl::Status FsdpEngine::SetCommunicators(Communicator* shard, Communicator* replicate) {
  if (!pending_gathers_.empty() || !pending_reduces_.empty() || in_backward_) {
    return absl::FailedPreconditionError(
        "SetCommunicators: a gather or gradient reduction is in flight; call DropStepGradients "
        "first");
  }
  if (grads_pending_) {
    return absl::FailedPreconditionError(
        "SetCommunicators: no_sync gradients are pending; call DropStepGradients first");
  }
  const int s = layout_.shard_degree();
  const int r = layout_.replicate_degree();
  const int shard_size = shard == nullptr ? 1 : shard->size();
  if (shard_size != s || (shard != nullptr && shard->rank() != layout_.ShardIndex(rank()))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SetCommunicators: shard communicator has ", shard_size, " ranks (this one ",
        shard == nullptr ? 0 : shard->rank(), ") but global rank ", rank(), " needs S=", s,
        " with shard index ", layout_.ShardIndex(rank()), " in ", layout_.DebugString()));
  }
  const int replicate_size = replicate == nullptr ? 1 : replicate->size();
  const int replicate_rank = replicate == nullptr ? 0 : replicate->rank();
  if (replicate_size < 1 || replicate_size > r || replicate_rank < 0 ||
      replicate_rank >= replicate_size || replicate_rank > layout_.ReplicateIndex(rank())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SetCommunicators: replicate communicator has ", replicate_size, " ranks (this one ",
        replicate_rank, ") but global rank ", rank(), " is in replica group ",
        layout_.ReplicateIndex(rank()), " of R=", r, " in ", layout_.DebugString()));
  }
  shard_ = shard;
  replicate_ = replicate;
  first_error_ = absl::OkStatus();
  return absl::OkStatus();
}

// ---- State access (fsdp/engine_state.h) ------------------------------------------------------

std::vector<ShardSlice> FsdpEngine::LocalParamState() const {
  WaitForOffloadCopies();  // The caller may write into the views (checkpoint load).
  return LocalShardSlices(flats_);
}

absl::StatusOr<std::vector<std::pair<std::string, at::Tensor>>> FsdpEngine::FullParamState(
    bool rank0_only) {
  if (!first_error_.ok()) return first_error_;
  auto full = GatherFullParams(flats_, shard_, device_, !rank0_only || options_.rank == 0);
  if (!full.ok()) return Fail(full.status());
  return full;
}

absl::Status FsdpEngine::LoadFullParamState(const std::map<std::string, at::Tensor>& state) {
  ReshardAll();            // Gathered copies would be stale.
  WaitForOffloadCopies();  // A host->device copy may still read the host shards.
  return LoadFullParams(flats_, state);
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
