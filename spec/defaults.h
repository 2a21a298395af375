// Default values of a JobSpec, filled after parsing and overrides and before validation.
//
// proto3 cannot tell "absent" from zero, so defaults come in two kinds:
//   * zero means "not given" (zero would be invalid anyway): filled whenever the field is zero,
//     except that a zero the user wrote in world_size, optimizer.lr, train.steps,
//     train.micro_batch_size, train.global_batch_size or fsdp.collective_timeout_s is kept, so
//     validation refuses it by name rather than the job silently running with the default;
//   * zero is a meaningful choice (weight_decay: 0, grad_clip: 0 = no clipping, ...): filled only
//     when the caller knows which fields the user wrote (`written`, from the parser) and this one
//     is not among them. A spec that arrives as a proto (already defaulted by shardctl) keeps them.
//
// The defaults (path: value; * marks "zero is meaningful"):
//   name: "job"                          world_size: 1
//   model.preset: "tiny" when architecture is unspecified and no size is given; then sizes and
//     architecture from the preset (spec/model_presets.h); model.architecture: GPT. None of
//     these while model.hf_dir is set and unresolved (spec/hf_config.h fills them from config.json)
//   model.vocab_size: 256 (byte-level)   *model.init_seed: 1337
//   data.format: TEXT                    data.seq_len: model.block_size
//   *data.val_fraction: 0.1 (0 with data.val_path)   (*data.shuffle_seed stays 0)
//   optimizer.kind: ADAMW                optimizer.lr: 3e-4          optimizer.eps: 1e-8
//   *optimizer.weight_decay: 0.1 (AdamW) *optimizer.beta1: 0.9       *optimizer.beta2: 0.95
//   *optimizer.momentum: 0.9 (SGD)       *optimizer.grad_clip: 1.0   *optimizer.min_lr: lr / 10
//   fsdp.sharding_strategy: FULL_SHARD   fsdp.auto_wrap_policy: TRANSFORMER_BLOCK (SIZE_BASED
//     for a TORCHSCRIPT model without fsdp.block_class)
//   fsdp.backward_prefetch: BACKWARD_PRE fsdp.min_num_params: 1e6 (SIZE_BASED only)
//   *fsdp.limit_all_gathers: true        fsdp.collective_timeout_s: 300
//   fsdp.mixed_precision.*: FP32
//   train.steps: 100                     train.micro_batch_size: 8
//   train.global_batch_size: micro_batch_size * world_size (no accumulation)
//   train.eval_batches: 8                train.log_every: 1          *train.seed: 1337
//   *checkpoint.resume_step: -1 (latest) restart.backoff_s: 5 (*)
//   device.kind: CPU
//   fault_tolerance.mode: NONE           fault_tolerance.min_replicas: 1
//   fault_tolerance.vote_timeout_s: 10   (*fault_tolerance.digest_every_steps stays 0)
//   *scheduling.preemptible: true
//
// Thread safety: pure functions.
#ifndef SHARDLINE_SPEC_DEFAULTS_H_
#define SHARDLINE_SPEC_DEFAULTS_H_

#include "absl/status/status.h"
#include "proto/job_spec.pb.h"
#include "spec/proto_yaml.h"

namespace shardline::spec {

// Fills defaults as described above. `written` may be null (then only zero-means-unset fields
// are filled). Errors: INVALID_ARGUMENT for an unknown model preset.
absl::Status FillDefaults(JobSpec* spec, const FieldPaths* written);

}  // namespace shardline::spec

#endif  // SHARDLINE_SPEC_DEFAULTS_H_
