#include "spec/defaults.h"

#include "common/status_macros.h"
#include "spec/model_presets.h"

namespace shardline::spec {
namespace {

// True when the user did not write `path` and we know what they wrote.
bool Unwritten(const FieldPaths* written, const char* path) {
  return written != nullptr && written->count(path) == 0;
}

// True when the user wrote `path` (even as 0). A 0 the user wrote is kept, so validation refuses
// it by name, instead of it silently becoming the default ("world_size: 0" is not "one rank").
bool Written(const FieldPaths* written, const char* path) {
  return written != nullptr && written->count(path) > 0;
}

}  // namespace

absl::Status FillDefaults(JobSpec* s, const FieldPaths* w) {
  if (s->name().empty()) s->set_name("job");
  if (s->world_size() == 0 && !Written(w, "world_size")) s->set_world_size(1);

  ModelSpec* m = s->mutable_model();
  // A model.hf_dir not yet resolved (spec/hf_config.h; the coordinator cannot read it) keeps its
  // model fields as written: the trainer fills them from config.json.
  const bool unresolved_hf =
      !m->hf_dir().empty() && m->architecture() == ModelSpec::ARCHITECTURE_UNSPECIFIED;
  if (m->architecture() == ModelSpec::ARCHITECTURE_UNSPECIFIED && m->preset().empty() &&
      m->n_embd() == 0 && m->n_layer() == 0 && m->n_head() == 0 && !unresolved_hf) {
    m->set_preset("tiny");
  }
  RETURN_IF_ERROR(ResolvePreset(m));
  if (!unresolved_hf) {
    if (m->architecture() == ModelSpec::ARCHITECTURE_UNSPECIFIED) {
      m->set_architecture(ModelSpec::GPT);
    }
    if (m->vocab_size() == 0) m->set_vocab_size(256);
  }
  if (Unwritten(w, "model.init_seed")) m->set_init_seed(1337);

  DataSpec* d = s->mutable_data();
  if (d->format() == DataSpec::FORMAT_UNSPECIFIED) d->set_format(DataSpec::TEXT);
  if (d->seq_len() == 0) d->set_seq_len(m->block_size());
  if (Unwritten(w, "data.val_fraction")) d->set_val_fraction(d->val_path().empty() ? 0.1f : 0.0f);

  OptimizerSpec* o = s->mutable_optimizer();
  if (o->kind() == OptimizerSpec::KIND_UNSPECIFIED) o->set_kind(OptimizerSpec::ADAMW);
  if (o->lr() == 0 && !Written(w, "optimizer.lr")) o->set_lr(3e-4);
  if (o->eps() == 0) o->set_eps(1e-8);
  if (Unwritten(w, "optimizer.weight_decay") && o->kind() == OptimizerSpec::ADAMW) {
    o->set_weight_decay(0.1);
  }
  if (Unwritten(w, "optimizer.beta1")) o->set_beta1(0.9);
  if (Unwritten(w, "optimizer.beta2")) o->set_beta2(0.95);
  if (Unwritten(w, "optimizer.momentum") && o->kind() == OptimizerSpec::SGD) o->set_momentum(0.9);
  if (Unwritten(w, "optimizer.grad_clip")) o->set_grad_clip(1.0);
  if (Unwritten(w, "optimizer.min_lr")) o->set_min_lr(o->lr() / 10);

  FsdpSpec* f = s->mutable_fsdp();
  if (f->sharding_strategy() == FsdpSpec::SHARDING_STRATEGY_UNSPECIFIED) {
    f->set_sharding_strategy(FsdpSpec::FULL_SHARD);
  }
  if (f->auto_wrap_policy() == FsdpSpec::WRAP_POLICY_UNSPECIFIED) {
    // A TorchScript model without fsdp.block_class has no blocks to wrap.
    f->set_auto_wrap_policy(m->architecture() == ModelSpec::TORCHSCRIPT && f->block_class().empty()
                                ? FsdpSpec::SIZE_BASED
                                : FsdpSpec::TRANSFORMER_BLOCK);
  }
  if (f->auto_wrap_policy() == FsdpSpec::SIZE_BASED && f->min_num_params() == 0) {
    f->set_min_num_params(1000000);
  }
  if (f->backward_prefetch() == FsdpSpec::BACKWARD_PREFETCH_UNSPECIFIED) {
    f->set_backward_prefetch(FsdpSpec::BACKWARD_PRE);
  }
  if (Unwritten(w, "fsdp.limit_all_gathers")) f->set_limit_all_gathers(true);
  if (f->collective_timeout_s() == 0 && !Written(w, "fsdp.collective_timeout_s")) {
    f->set_collective_timeout_s(300);
  }
  FsdpSpec::MixedPrecision* mp = f->mutable_mixed_precision();
  if (mp->param_dtype() == FsdpSpec::DTYPE_UNSPECIFIED) mp->set_param_dtype(FsdpSpec::FP32);
  if (mp->reduce_dtype() == FsdpSpec::DTYPE_UNSPECIFIED) mp->set_reduce_dtype(FsdpSpec::FP32);
  if (mp->buffer_dtype() == FsdpSpec::DTYPE_UNSPECIFIED) mp->set_buffer_dtype(FsdpSpec::FP32);

  TrainSpec* t = s->mutable_train();
  if (t->steps() == 0 && !Written(w, "train.steps")) t->set_steps(100);
  if (t->micro_batch_size() == 0 && !Written(w, "train.micro_batch_size")) {
    t->set_micro_batch_size(8);
  }
  if (t->global_batch_size() == 0 && !Written(w, "train.global_batch_size")) {
    t->set_global_batch_size(t->micro_batch_size() * s->world_size());
  }
  if (t->eval_batches() == 0) t->set_eval_batches(8);
  if (t->log_every() == 0) t->set_log_every(1);
  if (Unwritten(w, "train.seed")) t->set_seed(1337);

  if (Unwritten(w, "checkpoint.resume_step")) s->mutable_checkpoint()->set_resume_step(-1);
  if (Unwritten(w, "restart.backoff_s")) s->mutable_restart()->set_backoff_s(5);
  if (s->device().kind() == DeviceSpec::KIND_UNSPECIFIED) {
    s->mutable_device()->set_kind(DeviceSpec::CPU);
  }
  FaultToleranceSpec* ft = s->mutable_fault_tolerance();
  if (ft->mode() == FaultToleranceSpec::MODE_UNSPECIFIED) ft->set_mode(FaultToleranceSpec::NONE);
  if (ft->min_replicas() == 0) ft->set_min_replicas(1);
  if (ft->vote_timeout_s() == 0) ft->set_vote_timeout_s(10);
  if (Unwritten(w, "scheduling.preemptible")) s->mutable_scheduling()->set_preemptible(true);
  return absl::OkStatus();
}

}  // namespace shardline::spec
