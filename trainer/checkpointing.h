// TrainerCheckpointing: the trainer's checkpoint policy around a checkpoint::Checkpointer
// (checkpoint/sharded_checkpoint.h), so the training loop only calls three functions:
//
//   ASSIGN_OR_RETURN(auto ckpt, TrainerCheckpointing::Create(policy, engine, optimizer, world));
//   ASSIGN_OR_RETURN(checkpoint::TrainingProgress start, ckpt->Restore());  // resume/init/fresh
//   ... after every optimizer step: RETURN_IF_ERROR(ckpt->AfterStep(done, epoch, position));
//   RETURN_IF_ERROR(ckpt->Finish());                              // waits for an async save
//
// Restore: resume_step -1 loads the latest committed checkpoint if there is one (fresh start
// otherwise), N > 0 loads step N (NOT_FOUND if it is not committed), 0 starts fresh; without a
// checkpoint to resume, init_from_safetensors (if set) loads the weights (optimizer fresh).
// With fallback_if_missing (N came from the coordinator's registry, not from the spec) and
// step N not committed on disk, the newest committed checkpoint under dir is loaded instead
// (Checkpointer::Load refuses another job's), rank 0 logs it and calls report_fallback (the
// coordinator notes CHECKPOINT_FALLBACK on the job); rank 0 decides and every rank loads its
// choice. Nothing is deleted. With nothing committed under dir it fails NOT_FOUND naming the
// directory and step N: it never starts from scratch then.
// AfterStep saves every every_steps steps and after the last one with save_final; async_save
// writes from a background thread (the next save waits for the previous one), except the last
// step's save, which is synchronous. With replica-group fault tolerance, losing the group that
// wrote the last asynchronous save adds one synchronous save (NoteAbort).
//
// Tests only: SHARDLINE_TEST_PAUSE_IN_SAVE=STEP:SHARD:SECONDS[:ATTEMPT[:RANK]] makes the writer of
// shard SHARD sleep SECONDS in the save of step STEP, before it writes its data file (the other
// writers' files are written meanwhile and rank 0 waits to commit), and only in job attempt
// ATTEMPT (the policy's attempt) and global rank RANK (the engine's rank) when given
// (STEP:SHARD:SECONDS[:ATTEMPT[:RANK]]; another rank writing that shard of the step again, after
// a replica-group failure, does not pause). It prints "test pause in save: step S shard K" to
// stderr first, so a failure test can kill the rank in the middle of a save at a known point
// (tests/integration/checkpoint_kill_scenario_test.py). A malformed value is an error of Create.
//
// Thread safety: training thread only (collectives).
#ifndef SHARDLINE_TRAINER_CHECKPOINTING_H_
#define SHARDLINE_TRAINER_CHECKPOINTING_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "checkpoint/sharded_checkpoint.h"

namespace shardline::trainer {

struct CheckpointPolicy {
  std::string dir;  // "" disables saving and resuming (init_from_safetensors still works).
  int every_steps = 0;
  int keep_last = 0;
  bool async_save = false;
  bool save_final = false;
  int64_t resume_step = -1;
  std::string init_from_safetensors;
  // checkpoint.init_from_dcp: a PyTorch DCP directory (checkpoint/dcp_load.h) to start from when
  // this run has none of its own to resume.
  std::string init_from_dcp;
  // checkpoint.resume_from: another job's checkpoint (a step directory, or a job's directory for
  // its newest committed step) to continue from when this run has none of its own to resume.
  std::string resume_from;
  // The job checkpoint.resume_from's manifest must name (the coordinator's approval,
  // $SHARDLINE_RESUME_FROM_JOB); "" checks nothing (a run by hand, an admin's unregistered one).
  std::string resume_from_job;
  // False under the coordinator when its registry holds no committed checkpoint of this job:
  // nothing in the job's own directory is resumed (resume_step aside).
  bool resume_own = true;
  // model.hf_dir: a transformers folder whose weights start a job that resumes nothing (unless
  // init_from_safetensors is set, which wins).
  std::string init_from_hf;
  int64_t total_steps = 0;     // train.steps (for save_final).
  std::string optimizer_kind;  // "adamw" / "sgd".
  std::string job_id;
  int32_t attempt = 0;  // Recorded in the manifests with job_id.
  // How long rank 0 waits for the other shard writers before failing the save. The trainer uses
  // its collective timeout: in a synchronous save the other ranks wait that long in a collective.
  absl::Duration commit_timeout = absl::Minutes(10);
  // Coordinator reports (optional): data files (best effort); rank 0's commits (retried until
  // acknowledged, retention after: checkpoint/commit_reporter.h); a resume fallback.
  std::function<void(const checkpoint::SaveEvent&)> on_saved;
  std::function<absl::Status(const checkpoint::SaveEvent&)> report_commit;
  std::function<absl::Status(int64_t missing_step, int64_t step, const std::string& dir)>
      report_fallback;
  // resume_step came from the coordinator's registry ($SHARDLINE_RESUME_STEP): when it is not
  // committed on disk, fall back to the newest committed checkpoint (see Restore).
  bool fallback_if_missing = false;
};

class TrainerCheckpointing {
 public:
  // Borrowed pointers must outlive this object. Errors: checkpoint::Checkpointer::Create's.
  static absl::StatusOr<std::unique_ptr<TrainerCheckpointing>> Create(
      const CheckpointPolicy& policy, fsdp::FsdpEngine* engine, fsdp::ShardedOptimizer* optimizer,
      fsdp::Communicator* world);

  // Where training starts: step 0 and cursor (0, 0) when fresh.
  absl::StatusOr<checkpoint::TrainingProgress> Restore();
  // `steps_done` optimizer steps are complete; (epoch, position) is the sampler's cursor.
  absl::Status AfterStep(int64_t steps_done, int64_t epoch, int64_t position);
  // Whether AfterStep(steps_done, ...) saves.
  bool SavesAfter(int64_t steps_done) const;
  // Replica-group fault tolerance: later saves run over `world` (the live replica groups' ranks;
  // borrowed) and are written by replica group `writer_group` (the lowest live one), committed
  // by its first rank (checkpoint::Checkpointer::SetMembership). Waits for a pending save.
  absl::Status SetMembership(fsdp::Communicator* world, int writer_group);
  // Replica-group fault tolerance: the vote on step `vote_step` (its training or the work after
  // it) was ABORTed into the membership `live`. When the replica group that wrote the last
  // asynchronous save is not among the live groups, that save may never commit (its background
  // write uses no collective and no vote covers it; a writer killed in the middle of it leaves
  // the step uncommitted), and the live groups cannot know whether it did: they save `vote_step`
  // after its update, synchronously, so the vote on the work after that step covers the save
  // (SavesAfter(vote_step) is true from now on). Every live rank gets the same ABORT, so they all
  // agree; a replacement group is admitted only after that step's work.
  void NoteAbort(const std::vector<int>& live, int64_t vote_step);
  // A preemption (trainer/preemption.h): AfterStep(steps_done) saves, synchronously, whatever
  // the policy's period.
  void SaveAfter(int64_t steps_done) { preempt_step_ = steps_done; }
  // Waits for an asynchronous save, then for rank 0's commit reports (each bounded by
  // checkpoint::Checkpointer::Options::report_backoff, 5 minutes from its commit).
  absl::Status Finish();

 private:
  TrainerCheckpointing(const CheckpointPolicy& policy, fsdp::FsdpEngine* engine,
                       fsdp::ShardedOptimizer* optimizer, fsdp::Communicator* world,
                       std::unique_ptr<checkpoint::Checkpointer> ckpt,
                       std::shared_ptr<std::atomic<int64_t>> saving_step)
      : policy_(policy),
        engine_(engine),
        optimizer_(optimizer),
        world_(world),
        ckpt_(std::move(ckpt)),
        saving_step_(std::move(saving_step)) {}
  // Collective: policy_.resume_step if it is committed on disk, else the newest committed step
  // (rank 0 looks, every rank gets its answer). Errors: NOT_FOUND on rank 0 (ABORTED on the
  // others) when nothing is committed; listing errors.
  absl::StatusOr<int64_t> ResumeStepOnDisk();
  // Collective: loads policy_.resume_from (another job's checkpoint; its job id is not checked,
  // since continuing it is what was asked). A step directory "step_<N>" loads that step; any
  // other directory is a checkpoint root whose newest committed step is loaded. Errors name the
  // field and path: Checkpointer::Load's, and INVALID_ARGUMENT when its step is not below
  // train.steps (nothing would be left to train).
  absl::StatusOr<checkpoint::TrainingProgress> ContinueFrom();
  // checkpoint.init_from_dcp.
  absl::StatusOr<checkpoint::TrainingProgress> StartFromDcp();
  // OK when the manifest of `step` (-1: the newest committed) under `root` names the job the
  // coordinator approved (policy_.resume_from_job); PERMISSION_DENIED naming both otherwise.
  absl::Status CheckContinuedJob(const std::string& root, int64_t step) const;
  // policy_.init_from_hf's weights (hf/weights.h) into the engine: one tensor at a time, of
  // which this rank keeps the ranges its shards hold.
  absl::Status LoadHfWeights();
  CheckpointPolicy policy_;
  fsdp::FsdpEngine* engine_;
  fsdp::ShardedOptimizer* optimizer_;
  fsdp::Communicator* world_;
  std::unique_ptr<checkpoint::Checkpointer> ckpt_;  // Null without a dir.
  // The step of the save in progress, for the test pause (shared with its hook).
  std::shared_ptr<std::atomic<int64_t>> saving_step_;
  // The replica group that writes saves now (SetMembership; 0 without fault tolerance).
  int writer_group_ = 0;
  // The last save, when it was asynchronous: its step and writer group (NoteAbort).
  std::optional<std::pair<int64_t, int>> async_save_;
  // A step saved synchronously because the last asynchronous save's writers were lost; -1: none.
  int64_t resave_step_ = -1;
  int64_t preempt_step_ = -1;  // SaveAfter
};

}  // namespace shardline::trainer

#endif  // SHARDLINE_TRAINER_CHECKPOINTING_H_
