#include "trainer/fsdp_backend.h"

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "fsdp/wrap_policy.h"

namespace shardline::trainer {

absl::StatusOr<std::unique_ptr<FsdpBackend>> FsdpBackend::Create(models::LanguageModel& model,
                                                                 const TrainerConfig& c, int rank,
                                                                 const Comms& comms,
                                                                 at::Device device) {
  const std::string block_type = model.block_type();
  // Options the engine lacks are refused by spec validation (spec/validate.cc) before a
  // TrainerConfig exists.
  if (comms.world == nullptr) {
    return absl::InvalidArgumentError("FsdpBackend needs a world communicator");
  }
  fsdp::FsdpEngineOptions options = c.engine;
  options.rank = rank;
  if (block_type.empty()) {
    if (options.wrap_policy.kind == fsdp::WrapPolicyKind::kTransformerBlock) {
      // No hook points (a TorchScript model without fsdp.block_class; validation refuses
      // TRANSFORMER_BLOCK there, this covers specs that skipped it): the whole model is one unit.
      options.wrap_policy.kind = fsdp::WrapPolicyKind::kSizeBased;
      options.wrap_policy.min_num_params = INT64_MAX;
    }
  } else {
    options.wrap_policy.block_type = block_type;
  }
  if (c.fake_collectives && rank == 0) {
    SL_LOG(WARNING) << "fsdp.fake_collectives: the shard and replicate groups send nothing "
                       "(same shapes, local copies only); losses are not those of a real run";
  }
  const fsdp::DeferredInit deferred{model.deferred_init(), device};
  ASSIGN_OR_RETURN(
      std::unique_ptr<fsdp::FsdpEngine> engine,
      fsdp::FsdpEngine::Create(model.module_ptr(), c.layout, comms.shard, comms.replicate, options,
                               deferred.values == nullptr ? nullptr : &deferred));
  fsdp::ShardedOptimizerOptions opt;
  opt.kind = c.optimizer == OptimizerKind::kAdamW ? fsdp::ShardedOptimizerOptions::Kind::kAdamW
                                                  : fsdp::ShardedOptimizerOptions::Kind::kSgd;
  opt.lr = c.lr;
  opt.weight_decay = c.weight_decay;
  opt.beta1 = c.beta1;
  opt.beta2 = c.beta2;
  opt.eps = c.eps;
  opt.momentum = c.momentum;
  opt.grad_clip = c.grad_clip;
  // The fused AdamW kernel for every AdamW job, on CUDA and on the CPU: the op-by-op update makes
  // about a dozen passes over the state per flat parameter (one kernel launch each on CUDA); with
  // cpu_offload those host passes dominated the step. Float rounding differences only (see
  // ShardedOptimizerOptions::fused and fsdp_engine_test
  // FusedAdamWMatchesOpByOpWithinFloatRounding).
  opt.fused = opt.kind == fsdp::ShardedOptimizerOptions::Kind::kAdamW;
  ASSIGN_OR_RETURN(std::unique_ptr<fsdp::ShardedOptimizer> optimizer,
                   fsdp::ShardedOptimizer::Create(engine.get(), opt));
  model.set_unit_runner(engine.get());
  return std::unique_ptr<FsdpBackend>(
      new FsdpBackend(model, c, comms, std::move(engine), std::move(optimizer)));
}

FsdpBackend::~FsdpBackend() { model_.set_unit_runner(nullptr); }

std::string FsdpBackend::Describe() const {
  return absl::StrCat(
      "FSDP ", engine_->layout().DebugString(), ", ", engine_->flat_params().size(),
      " units, sharded ", config_.optimizer == OptimizerKind::kAdamW ? "AdamW" : "SGD",
      config_.engine.activation_checkpointing ? ", activation checkpointing" : "",
      config_.engine.cpu_offload
          ? absl::StrCat(", CPU offload (",
                         fsdp::DevicePersistentStateBytes(*engine_, *optimizer_) / 1048576.0,
                         " MiB of the persistent state on the device)")
          : "",
      config_.fake_collectives ? ", fake collectives" : "");
}

std::string FsdpBackend::MemorySummary() const {
  const fsdp::MemoryStats m = engine_->memory_stats();
  std::string out = absl::StrCat("FSDP memory: peak gathered parameters ",
                                 m.peak_gathered_param_bytes, " bytes, peak unsharded gradients ",
                                 m.peak_unsharded_grad_bytes, " bytes; units (padded elements):");
  const auto& flats = engine_->flat_params();
  for (size_t i = 0; i < flats.size() && i < 16; ++i) {
    absl::StrAppend(&out, " ", flats[i]->name(), "=", flats[i]->padded_numel());
  }
  if (flats.size() > 16) absl::StrAppend(&out, " ... (", flats.size(), " units)");
  return out;
}

void FsdpBackend::set_step(int64_t step) {
  engine_->set_step(step);
  comms_.world->set_step(step);
}

absl::Status FsdpBackend::SetCommunicators(const Comms& comms) {
  if (comms.world == nullptr) {
    return absl::InvalidArgumentError("FsdpBackend needs a world communicator");
  }
  RETURN_IF_ERROR(engine_->SetCommunicators(comms.shard, comms.replicate));
  comms_ = comms;
  return absl::OkStatus();
}

absl::Status FsdpBackend::Backward(const at::Tensor& loss, bool sync) {
  return engine_->Backward(scaler_.has_value() ? loss * scaler_->scale() : loss, sync);
}

absl::StatusOr<double> FsdpBackend::Step(double lr) {
  optimizer_->set_lr(lr);
  if (scaler_.has_value()) optimizer_->set_grad_scale(scaler_->scale());
  ASSIGN_OR_RETURN(double norm, optimizer_->Step());
  if (scaler_.has_value()) {
    const bool skipped = optimizer_->last_step_skipped();
    const double was = scaler_->scale();
    scaler_->Update(skipped);
    if (skipped) {
      SL_LOG(WARNING) << "float16 loss scaling: gradients overflowed at scale " << was
                      << "; step skipped, scale now " << scaler_->scale();
    }
  }
  return norm;
}

std::optional<double> FsdpBackend::loss_scale() const {
  if (!scaler_.has_value()) return std::nullopt;
  return scaler_->scale();
}

int64_t FsdpBackend::skipped_steps() const {
  return scaler_.has_value() ? scaler_->skipped_steps() : 0;
}

absl::Status FsdpBackend::AllReduceSum(const at::Tensor& values) {
  const at::Device device = model_.module().parameters().front().device();
  if (device.is_cpu()) return comms_.world->AllReduce(values, fsdp::ReduceOp::kSum);
  // NCCL reduces device tensors only.
  at::Tensor on_device = values.to(device);
  RETURN_IF_ERROR(comms_.world->AllReduce(on_device, fsdp::ReduceOp::kSum));
  values.copy_(on_device.cpu());
  return absl::OkStatus();
}

int64_t FsdpBackend::StateBytes() const {
  return fsdp::PersistentStateBytes(*engine_, *optimizer_);
}

absl::Status FsdpBackend::CommunicationError() const {
  RETURN_IF_ERROR(engine_->CommAsyncError());
  return comms_.world == nullptr ? absl::OkStatus() : comms_.world->AsyncError();
}

}  // namespace shardline::trainer
