#include "trainer/checkpoint_startup.h"

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "trainer/checkpoint_dir_probe.h"
#include "trainer/coordinator_reporter.h"
#include "trainer/preemption.h"
#include "trainer/train_loop.h"

namespace shardline::trainer {

bool WantsCheckpoints(const TrainerConfig& c) {
  return !c.checkpoint_dir.empty() || !c.init_from_safetensors.empty() || !c.model.hf_dir.empty() ||
         !c.resume_from.empty() || !c.init_from_dcp.empty();
}

// Under the coordinator each job gets its own directory <dir>/<job id>, shared by the job's
// attempts (a restarted attempt resumes from the latest checkpoint there).
std::string JobCheckpointDir(const TrainerConfig& c, const launch::RankEnv& env) {
  return c.checkpoint_dir.empty() || env.job_id.empty()
             ? c.checkpoint_dir
             : absl::StrCat(c.checkpoint_dir, "/", env.job_id);
}

// With checkpoints on and more than one rank: every rank must see the directory rank 0 writes
// to, or the job would learn it only at its first restart (trainer/checkpoint_dir_probe.h).
absl::Status CheckCheckpointDir(const TrainerConfig& c, const launch::RankEnv& env,
                                at::Device device, fsdp::KvStore* store,
                                fsdp::Communicator* world) {
  if (c.checkpoint_dir.empty() || world == nullptr || world->size() < 2) return absl::OkStatus();
  // A replacement rank's peers checked the directory at the attempt's start.
  if (c.replica_fault_tolerance && env.rank_generation > 0) return absl::OkStatus();
  CheckpointDirProbeOptions o;
  o.dir = JobCheckpointDir(c, env);
  o.configured_dir = c.checkpoint_dir;
  o.host = env.node_name;
  o.timeout = absl::Seconds(c.collective_timeout_s);
  return CheckCheckpointDirShared(o, store, world, device);
}

namespace {

// Which of the job's own checkpoints may be resumed. Run by hand: the spec's
// checkpoint.resume_step. Under the coordinator the step travels one way, its registry's
// SHARDLINE_RESUME_STEP (the coordinator already folded the spec's resume_step into it for a
// first attempt with nothing committed); the spec's own value then only tells the two kinds of
// step apart, since a step the spec asked for must exist and the registry's may fall back.
void SetResumeStep(const TrainerConfig& c, const launch::RankEnv& env, CheckpointPolicy& policy) {
  policy.resume_step = c.resume_step;
  if (!env.resume_step.has_value()) return;
  if (*env.resume_step > 0) {
    policy.resume_step = *env.resume_step;
    // The coordinator's registry step (not the spec's own resume_step, which the coordinator
    // passes on for a first attempt): when it is missing on disk, resume from the newest
    // committed checkpoint there instead, and say so.
    policy.fallback_if_missing = *env.resume_step != c.resume_step;
  } else {
    // The registry holds no committed checkpoint of this job: one found in its directory was
    // not recorded as written by it (another user could have planted it there, with this job's
    // id in its manifest, before the job started), so none is loaded (#31 item 3).
    policy.resume_own = false;
  }
}

}  // namespace

// The spec's checkpoint policy over the engine of `fsdp` (null with --backend local, which has
// no checkpoints). Under the coordinator each save is reported to it.
absl::StatusOr<std::unique_ptr<TrainerCheckpointing>> CreateCheckpointing(
    const TrainerConfig& c, const launch::RankEnv& env, FsdpBackend* fsdp,
    const std::string& metrics_out) {
  if (fsdp == nullptr) {
    return absl::InvalidArgumentError(
        "checkpoint.dir / init_from_safetensors / init_from_dcp / model.hf_dir need the FSDP "
        "backend (--backend "
        "fsdp or auto)");
  }
  CheckpointPolicy policy;
  policy.dir = JobCheckpointDir(c, env);
  policy.every_steps = c.checkpoint_every_steps;
  policy.keep_last = c.checkpoint_keep_last;
  policy.async_save = c.checkpoint_async;
  policy.save_final = c.checkpoint_save_final;
  SetResumeStep(c, env, policy);
  policy.resume_from_job = env.resume_from_job;
  policy.init_from_safetensors = c.init_from_safetensors;
  policy.init_from_dcp = c.init_from_dcp;
  policy.resume_from = c.resume_from;
  policy.init_from_hf = c.model.hf_dir;
  policy.total_steps = c.steps;
  policy.optimizer_kind = c.optimizer == OptimizerKind::kSgd ? "sgd" : "adamw";
  policy.job_id = env.job_id;
  policy.attempt = env.attempt;
  policy.commit_timeout = absl::Seconds(c.collective_timeout_s);
  if (!env.coordinator.empty() && !env.job_id.empty()) {
    absl::StatusOr<CoordinatorReporter> reporter = MakeCoordinatorReporter(
        {env.coordinator, env.rdzv_secret, env.job_id, env.attempt, env.rank, metrics_out,
         [c](int64_t step) { return StepIsLogged(c, step); },
         [](int64_t step) { return step == PreemptionStep(); }});
    if (!reporter.ok()) return reporter.status();
    policy.on_saved = reporter->on_saved;
    policy.report_commit = reporter->report_commit;
    policy.report_fallback = reporter->report_fallback;
  }
  return TrainerCheckpointing::Create(policy, fsdp->engine(), fsdp->optimizer(), fsdp->world());
}

// Where training starts: a restored checkpoint's step and data cursor, or the beginning. A
// replacement rank of a replica-group fault-tolerant job restores nothing (it is healed).
absl::Status RestoreCheckpoint(TrainerCheckpointing* ckpt, TrainLoopOptions& loop, bool joining) {
  if (ckpt == nullptr) return absl::OkStatus();
  if (!joining) {
    absl::StatusOr<checkpoint::TrainingProgress> start = ckpt->Restore();
    if (!start.ok()) return start.status();
    loop.start_step = start->step;
    loop.start_cursor = {start->data_epoch, start->data_position};
    loop.start_cursor_from_step = start->cursor_from_step;
  }
  loop.after_step = [ckpt](int64_t done, const data::DataCursor& next) {
    return ckpt->AfterStep(done, next.epoch, next.position);
  };
  loop.saves_after_step = [ckpt](int64_t done) { return ckpt->SavesAfter(done); };
  return absl::OkStatus();
}

}  // namespace shardline::trainer
