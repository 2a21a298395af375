#include "trainer/config.h"

#include "common/logging.h"
#include "common/status_macros.h"
#include "fsdp/engine_options_from_spec.h"
#include "fsdp/layout.h"
#include "proto/job_spec.pb.h"
#include "spec/job_spec.h"

namespace shardline::trainer {

absl::StatusOr<TrainerConfig> LoadTrainerConfig(const std::string& spec_path,
                                                const std::vector<std::string>& overrides,
                                                const launch::RankEnv& env) {
  spec::LoadOptions options;
  options.overrides = overrides;
  // The launch's world size is the one this rank runs at; the spec's own is only logged.
  options.after_overrides = [&env](JobSpec* spec) {
    if (spec->world_size() != env.world_size) {
      SL_LOG(INFO) << "spec world_size " << spec->world_size() << " replaced by WORLD_SIZE "
                   << env.world_size << " from the environment";
    }
    spec->set_world_size(env.world_size);
  };
  ASSIGN_OR_RETURN(JobSpec s, spec::LoadJobSpecFile(spec_path, options));

  TrainerConfig c;
  c.job_name = s.name();
  c.spec_yaml = spec::JobSpecToYaml(s);
  ASSIGN_OR_RETURN(c.model, models::ModelConfigFromSpec(s.model()));
  c.model.block_class = s.fsdp().block_class();  // A model-loading concern (script blocks).

  c.data_path = s.data().path();
  c.data_paths.assign(s.data().paths().begin(), s.data().paths().end());
  c.val_path = s.data().val_path();
  c.vocab_path = s.data().vocab_path();
  c.data_format = s.data().format() == DataSpec::TOKENS_U16   ? data::TokenFormat::kU16
                  : s.data().format() == DataSpec::TOKENS_U32 ? data::TokenFormat::kU32
                                                              : data::TokenFormat::kText;
  c.val_fraction = s.data().val_fraction();
  c.seq_len = s.data().seq_len();
  c.shuffle_seed = s.data().shuffle_seed();

  const OptimizerSpec& o = s.optimizer();
  c.optimizer = o.kind() == OptimizerSpec::SGD ? OptimizerKind::kSgd : OptimizerKind::kAdamW;
  c.lr = o.lr();
  c.min_lr = o.min_lr();
  c.weight_decay = o.weight_decay();
  c.beta1 = o.beta1();
  c.beta2 = o.beta2();
  c.eps = o.eps();
  c.momentum = o.momentum();
  c.grad_clip = o.grad_clip();
  c.warmup_steps = o.warmup_steps();

  const FsdpSpec& f = s.fsdp();
  ASSIGN_OR_RETURN(c.layout, fsdp::ParallelLayout::Create(s.world_size(), f.sharding_strategy(),
                                                          f.hybrid_shard_degree()));
  ASSIGN_OR_RETURN(c.engine, fsdp::EngineOptionsFromSpec(f));
  c.fake_collectives = f.fake_collectives();
  c.collective_timeout_s = f.collective_timeout_s();
  const FaultToleranceSpec& ft = s.fault_tolerance();
  c.replica_fault_tolerance = ft.mode() == FaultToleranceSpec::REPLICA_GROUPS;
  c.ft_min_replicas = ft.min_replicas();
  c.ft_digest_every_steps = ft.digest_every_steps();

  const TrainSpec& t = s.train();
  c.steps = t.steps();
  c.global_batch_size = t.global_batch_size();
  c.micro_batch_size = t.micro_batch_size();
  c.accumulation_steps = t.global_batch_size() / (t.micro_batch_size() * s.world_size());
  c.eval_every = t.eval_every();
  c.eval_batches = t.eval_batches();
  c.log_every = t.log_every();
  c.seed = t.seed();
  c.deterministic = t.deterministic();
  c.sample_tokens = t.sample_tokens();
  c.sample_prompt = t.sample_prompt();
  c.tensorboard_dir = t.tensorboard_dir();

  c.cuda = s.device().kind() == DeviceSpec::CUDA;
  c.cpu_threads = s.device().cpu_threads();
  c.allow_tf32 = s.device().allow_tf32();

  const CheckpointSpec& ck = s.checkpoint();
  c.checkpoint_dir = ck.dir();
  c.checkpoint_every_steps = ck.every_steps();
  c.checkpoint_keep_last = ck.keep_last();
  c.checkpoint_async = ck.async_save();
  c.checkpoint_save_final = ck.save_final();
  c.resume_step = ck.resume_step();
  c.resume_from = ck.resume_from();
  c.init_from_safetensors = ck.init_from_safetensors();
  c.init_from_dcp = ck.init_from_dcp();
  return c;
}

}  // namespace shardline::trainer
