// TrainerConfig: everything one trainer rank needs, resolved from the job spec file, the --set
// overrides and the torchrun-style environment, as plain values.
//
// Torch-free and proto-free in its header on purpose: LibTorch's include directory ships older
// protobuf headers that shadow Debian's in every target that depends on LibTorch, so the
// trainer's LibTorch code never includes a generated .pb.h; this target (which may) converts.
//
// Environment (like torchrun's workers):
//   RANK, WORLD_SIZE, LOCAL_RANK    default 0, 1, RANK when all are unset (a single process)
//   MASTER_ADDR, MASTER_PORT        the TCP store rank 0 serves; required when WORLD_SIZE > 1
//                                   unless the coordinator's rendezvous is given (below)
//   SHARDLINE_COORDINATOR, SHARDLINE_RDZV_NAMESPACE, SHARDLINE_RDZV_SECRET, SHARDLINE_JOB_ID,
//   SHARDLINE_ATTEMPT, SHARDLINE_ADVERTISE_ADDRESS, SHARDLINE_NODE_NAME: set by the worker
//   daemon. The rendezvous secret is the attempt credential, the trainer's only token: it
//   reports progress and checkpoints for this job attempt and reads and writes its rendezvous
//   namespace.
//   SHARDLINE_TLS_CA (a CA file path: TLS to the coordinator), SHARDLINE_INSECURE=1: also set
//   by the daemon, read where the coordinator client is made (client/client_tls.h).
//   SHARDLINE_STORE_SECRET          the TCP store's shared secret (the same on every rank);
//                                   required when MASTER_ADDR is not loopback, unless
//                                   SHARDLINE_STORE_INSECURE=1 (docs/security.md)
// WORLD_SIZE wins over the spec's world_size (logged when they differ): the spec's batch sizes
// then define the same training at the new W, or are rejected if they do not divide.
//
// Thread safety: pure functions (LoadTrainerConfig reads files and nothing else).
#ifndef SHARDLINE_TRAINER_CONFIG_H_
#define SHARDLINE_TRAINER_CONFIG_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "data/token_file.h"
#include "fsdp/engine_options.h"
#include "fsdp/layout.h"
#include "models/model_config.h"

namespace shardline::trainer {

struct RankEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr;  // "" when unset.
  int master_port = 0;      // 0 when unset.
  // Coordinator rendezvous (worker daemon); empty when standalone.
  std::string coordinator;
  std::string rdzv_namespace;
  std::string rdzv_secret;  // also the attempt credential: the bearer token of every call
  std::string job_id;
  int attempt = 0;
  // Address this rank's collectives bind to and advertise: SHARDLINE_ADVERTISE_ADDRESS, else
  // 127.0.0.1 when MASTER_ADDR is loopback (or unset), else this host's name.
  std::string advertise_address;
  // The worker's node name (SHARDLINE_NODE_NAME), else this host's name: for messages.
  std::string node_name;
  // The TCP store's shared secret (SHARDLINE_STORE_SECRET); "" when unset.
  std::string store_secret;
  // SHARDLINE_RANK_GENERATION: 0 for a rank's first process in the attempt; >= 1 for a
  // replacement of a lost replica group, which joins the running job (fault_tolerance
  // REPLICA_GROUPS) instead of starting or resuming.
  int rank_generation = 0;
  // SHARDLINE_OPEN_ROOTS (the worker's path roots, absolute, ',' between): the trainer opens its
  // input files beneath them (common/open_beneath.h); empty when unset.
  std::vector<std::string> open_roots;
  // SHARDLINE_RESUME_STEP (the worker daemon, from the coordinator's checkpoint registry): set,
  // the only step of this job's own checkpoints the trainer may resume (0: none, start fresh or
  // continue checkpoint.resume_from; a checkpoint found in its directory was not recorded as
  // this job's and is not loaded). -1 when unset (the trainer run by hand: the spec decides).
  int64_t resume_step = -1;
  bool has_resume_step = false;
  // SHARDLINE_RESUME_FROM_JOB: the job whose checkpoint checkpoint.resume_from names, as the
  // coordinator approved it; the trainer refuses a manifest of another job. "" when unset.
  std::string resume_from_job;
};

// Reads the variables above through `getenv` (tests pass a fake).
// Errors: INVALID_ARGUMENT naming the variable and its value (not a number, RANK outside
// [0, WORLD_SIZE), WORLD_SIZE > 1 without MASTER_ADDR/MASTER_PORT or a coordinator, a
// non-loopback MASTER_ADDR without SHARDLINE_STORE_SECRET).
absl::StatusOr<RankEnv> ReadRankEnv(
    const std::function<const char*(const char*)>& getenv = nullptr);

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
};

// Loads the spec at `spec_path`, applies `overrides` ("path=value"), sets world_size from
// `env`, fills defaults, validates and converts. Errors: INVALID_ARGUMENT / NOT_FOUND from the
// spec pipeline (spec/job_spec.h), naming field and value.
absl::StatusOr<TrainerConfig> LoadTrainerConfig(const std::string& spec_path,
                                                const std::vector<std::string>& overrides,
                                                const RankEnv& env);

}  // namespace shardline::trainer

#endif  // SHARDLINE_TRAINER_CONFIG_H_
