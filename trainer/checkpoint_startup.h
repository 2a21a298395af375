// The trainer's checkpoints from its start: whether the spec wants them, the job's directory
// under the coordinator, the check that every rank sees it, the policy built from the spec (and
// the coordinator's resume step), and where training starts. trainer_main.cc calls these in
// order; TrainerCheckpointing (checkpointing.h) does the saving and loading.
//
// Thread safety: call from the training thread.
#ifndef SHARDLINE_TRAINER_CHECKPOINT_STARTUP_H_
#define SHARDLINE_TRAINER_CHECKPOINT_STARTUP_H_

#include <memory>
#include <string>

#include <ATen/core/Tensor.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fsdp/communicator.h"
#include "fsdp/kv_store.h"
#include "launch/rank_env.h"
#include "trainer/checkpointing.h"
#include "trainer/config.h"
#include "trainer/fsdp_backend.h"
#include "trainer/store.h"
#include "trainer/train_loop.h"

namespace shardline::trainer {

// checkpoint.dir, init_from_safetensors or model.hf_dir: the run needs TrainerCheckpointing.
bool WantsCheckpoints(const TrainerConfig& c);

// checkpoint.dir, or under the coordinator <checkpoint.dir>/<job id>, shared by the job's
// attempts (a restarted attempt resumes from the latest checkpoint there).
std::string JobCheckpointDir(const TrainerConfig& c, const launch::RankEnv& env);

// With checkpoints on and more than one rank: every rank must see the directory rank 0 writes
// to, or the job would learn it only at its first restart (trainer/checkpoint_dir_probe.h).
// Errors: INVALID_ARGUMENT when some rank cannot see it; the probe's otherwise.
absl::Status CheckCheckpointDir(const TrainerConfig& c, const launch::RankEnv& env,
                                at::Device device, fsdp::KvStore* store, fsdp::Communicator* world);

// The spec's checkpoint policy over the engine of `fsdp` (null with --backend local, which has
// no checkpoints: INVALID_ARGUMENT). Under the coordinator each save is reported to it, and
// SHARDLINE_RESUME_STEP (the coordinator's registry step) overrides the spec's resume_step.
// `metrics_out`: this rank's metrics file, whose steps rank 0 reports before each commit.
absl::StatusOr<std::unique_ptr<TrainerCheckpointing>> CreateCheckpointing(
    const TrainerConfig& c, const launch::RankEnv& env, FsdpBackend* fsdp,
    const std::string& metrics_out);

// Where training starts: a restored checkpoint's step and data cursor, or the beginning; then
// saves after every step as the policy says. A replacement rank of a replica-group
// fault-tolerant job (`joining`) restores nothing (it is healed). Null `ckpt`: nothing to do.
absl::Status RestoreCheckpoint(TrainerCheckpointing* ckpt, TrainLoopOptions& loop, bool joining);

}  // namespace shardline::trainer

#endif  // SHARDLINE_TRAINER_CHECKPOINT_STARTUP_H_
