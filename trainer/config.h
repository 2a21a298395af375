// TrainerConfig: everything one trainer rank needs from its job spec, resolved from the spec
// file, the --set overrides and the launch's world size, as plain values.
//
// Torch-free and proto-free in its header on purpose: LibTorch's include directory ships older
// protobuf headers that shadow Debian's in every target that depends on LibTorch, so the
// trainer's LibTorch code never includes a generated .pb.h; this target (which may) converts.
//
// The launch's part (the rank, the world size, the coordinator's resume step, ...) is not read
// here: it is a launch::RankEnv (launch/rank_env.h), read by trainer/launch_env.h. The world size
// comes from there only: WORLD_SIZE replaces the spec's world_size (logged when they differ), and
// the spec's batch sizes then define the same training at the new W, or are rejected if they do
// not divide.
//
// Thread safety: pure functions (LoadTrainerConfig reads files and nothing else).
#ifndef SHARDLINE_TRAINER_CONFIG_H_
#define SHARDLINE_TRAINER_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "data/token_file.h"
#include "fsdp/engine_options.h"
#include "fsdp/layout.h"
#include "launch/rank_env.h"
#include "models/model_config.h"

namespace shardline::trainer {

enum class OptimizerKind { kAdamW, kSgd };

struct TrainerConfig {
  std::string job_name;
  std::string spec_yaml;  // The resolved spec (defaults filled), for the log.

  models::ModelConfig model;

  // Data.
  std::string data_path;                // Absolute; "" when data_paths are given.
  std::vector<std::string> data_paths;  // data.paths: training files in order.
  std::string val_path;                 // data.val_path: "" for the training data's tail.
  std::string vocab_path;               // data.vocab_path (data/vocab.h); "" for none.
  data::TokenFormat data_format = data::TokenFormat::kText;
  double val_fraction = 0.1;
  int seq_len = 0;
  uint64_t shuffle_seed = 0;

  // Optimizer and schedule.
  OptimizerKind optimizer = OptimizerKind::kAdamW;
  double lr = 3e-4, min_lr = 3e-5, weight_decay = 0.0, beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double momentum = 0.0, grad_clip = 0.0;
  int warmup_steps = 0;

  // Parallelism (validated by fsdp::ParallelLayout).
  fsdp::ParallelLayout layout;
  // Every FSDP engine option, from fsdp::EngineOptionsFromSpec, handed to the engine as it is
  // (rank and block type are filled in by the backend).
  fsdp::FsdpEngineOptions engine;
  bool fake_collectives = false;
  int collective_timeout_s = 300;
  // fault_tolerance (mode REPLICA_GROUPS): trainer/replica_fault_tolerance.h.
  bool replica_fault_tolerance = false;
  int ft_min_replicas = 0;
  int ft_digest_every_steps = 0;

  // Loop.
  int steps = 0;
  int global_batch_size = 0;
  int micro_batch_size = 0;
  int accumulation_steps = 1;  // global_batch_size / (micro_batch_size * W).
  int eval_every = 0;
  int eval_batches = 1;
  int log_every = 1;
  uint64_t seed = 0;
  bool deterministic = false;
  int sample_tokens = 0;
  std::string sample_prompt;
  std::string tensorboard_dir;  // train.tensorboard_dir (absolute); empty: no event files.

  // Device.
  bool cuda = false;
  int cpu_threads = 0;
  bool allow_tf32 = false;  // device.allow_tf32 (CUDA only; validation refuses it on CPU).

  // Checkpoints (spec checkpoint.*, paths absolute; trainer/checkpointing.h).
  std::string checkpoint_dir;
  int checkpoint_every_steps = 0;
  int checkpoint_keep_last = 0;
  bool checkpoint_async = false;
  bool checkpoint_save_final = false;
  int64_t resume_step = -1;  // -1 latest (if any), 0 fresh, N that step.
  std::string resume_from;   // checkpoint.resume_from: another job's step or checkpoint directory.
  std::string init_from_safetensors;
  std::string init_from_dcp;  // checkpoint.init_from_dcp: a PyTorch DCP directory.
};

// Loads the spec at `spec_path`, applies `overrides` ("path=value"), sets world_size to the
// launch's (`env.world_size`, after the overrides: it also beats a --set world_size), fills
// defaults, validates and converts. Errors: INVALID_ARGUMENT / NOT_FOUND from the
// spec pipeline (spec/job_spec.h), naming field and value.
absl::StatusOr<TrainerConfig> LoadTrainerConfig(const std::string& spec_path,
                                                const std::vector<std::string>& overrides,
                                                const launch::RankEnv& env);

}  // namespace shardline::trainer

#endif  // SHARDLINE_TRAINER_CONFIG_H_
