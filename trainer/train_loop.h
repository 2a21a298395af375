// The training loop of one rank: reads top to bottom as one optimizer step.
//
//   for step in [0, steps):
//     lr = warmup + cosine schedule (trainer/lr_schedule.h)
//     for each of A = G / (B * W) micro-batches of this rank (data/sampler.h):
//       BeginForward; logits = model(x); loss = cross_entropy(logits, y)
//       Backward(loss / A, sync = last micro-batch)      (no_sync before the last)
//     grad_norm = Step(lr)                                (clip, update, zero grads)
//     every eval_every steps and at the end: validation loss averaged over ranks
//     at the end: text sampled by every rank with the same seed (FSDP forwards are
//       collective), printed by rank 0
//     after_step: a checkpoint save (trainer/checkpointing.h) when it is due
//     every log_every steps, with an evaluation and at the end: train loss averaged over
//       ranks, metrics line
//     a preemption agreed in that all-reduce (not at the last step): save, and end here
//
// The same loop drives the single-process and the FSDP backend (trainer/backend.h).
//
// Errors: the backend's (communication: UNAVAILABLE / DEADLINE_EXCEEDED naming group, op and
// step), ABORTED when the loss becomes NaN or infinite (names the step), CANCELLED when
// should_stop() turns true (a signal), INVALID_ARGUMENT for data that cannot fill one global
// batch, INTERNAL for LibTorch failures.
//
// Thread safety: call from one thread per rank.
#ifndef SHARDLINE_TRAINER_TRAIN_LOOP_H_
#define SHARDLINE_TRAINER_TRAIN_LOOP_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "data/sampler.h"
#include "data/token_dataset.h"
#include "data/vocab.h"
#include "models/language_model.h"
#include "trainer/backend.h"
#include "trainer/config.h"
#include "trainer/metrics.h"
#include "trainer/step_gate.h"
#include "trainer/tensorboard_writer.h"

namespace shardline::trainer {

struct TrainLoopOptions {
  int rank = 0;
  int world_size = 1;
  MetricsWriter* metrics = nullptr;          // Optional; borrowed.
  TensorBoardWriter* tensorboard = nullptr;  // Optional; borrowed; the leader writes to it.
  // With a gate: the run directory where this rank, should it become the leader without
  // `tensorboard` (rank 0's group was lost), opens an event file of its own; TensorBoard merges
  // a run's files by step. Empty: none.
  std::string tensorboard_dir;
  std::function<void(const StepMetrics&)> on_log;  // Optional; each logged line (tests).
  std::function<bool()> should_stop;               // Optional; polled between steps.
  // Peak FLOP/s of one rank's device, for the MFU estimate.
  double peak_flops_per_rank = 1e11;
  // Where training starts (a restored checkpoint's cursor and step).
  data::DataCursor start_cursor;
  // start_cursor is unknown: start where the sampler is after start_step steps.
  bool start_cursor_from_step = false;
  int64_t start_step = 0;
  // Optional; runs after every optimizer step with the steps completed and the cursor of the
  // next global batch (checkpointing, trainer/checkpointing.h). An error ends
  // training with it.
  std::function<absl::Status(int64_t steps_done, const data::DataCursor& next)> after_step;
  // Optional, with after_step: whether after_step saves after `steps_done` steps (a gate votes
  // on the work after such a step's update). Unset: after_step is taken to save every step.
  std::function<bool(int64_t steps_done)> saves_after_step;
  // Optional; tests only: runs when this rank reaches the final sample, before its first
  // sampling forward (SHARDLINE_TEST_PAUSE_IN_SAMPLE, trainer/trainer_main.cc).
  std::function<void()> before_sample;
  // Optional, borrowed: data.vocab_path's vocabulary; the sample prompt is encoded and the sample
  // decoded with it (otherwise bytes for TEXT data, ids for token data).
  const data::TokenVocab* vocab = nullptr;
  // Optional, borrowed: replica-group fault tolerance (trainer/step_gate.h). Each step is then
  // voted on before the optimizer touches it: ABORT trains it again on the same data, LEAVE
  // ends the loop (UNAVAILABLE; gate->left()), COMMIT's loss (the mean of the members' votes)
  // replaces the world all-reduce; the gate's leader logs. A step with evaluation, the final
  // sample or a checkpoint save after its update has that work voted on too (EndAfterStep): a
  // communication failure there breaks the gate instead of ending training, the rest of the
  // work is skipped, the vote aborts and the live groups do it again. Null: the plain loop.
  StepGate* gate = nullptr;
  // Optional (the plain loop only; a gate's steps are voted on instead): whether this rank was
  // asked to stop for a preemption (trainer/preemption.h). Polled every step; the ranks agree in
  // the step's loss all-reduce. When any was, before the last step: on_preempt(steps_done)
  // (required with it), which makes after_step save that step; then the loop ends after it
  // (TrainSummary::preempted_after_step).
  std::function<bool()> preempt_requested;
  std::function<void(int64_t steps_done)> on_preempt;
};

struct TrainSummary {
  int64_t steps = 0;                 // Optimizer steps completed in total.
  std::vector<double> train_losses;  // Per step (this run's steps), averaged over ranks.
  std::optional<double> final_val_loss;
  std::vector<std::pair<int64_t, double>> val_losses;  // (step, loss).
  std::string sample;       // Decoded sample text (or ids), "" when none.
  data::DataCursor cursor;  // Where the next step would read.
  // > 0: the loop ended early after this step, saved for a preemption (preempt_requested).
  int64_t preempted_after_step = 0;
};

// Whether step `step` (1-based) writes a metrics line: the last step, an evaluation step, every
// train.log_every-th step (an evaluation that failed under replica-group fault tolerance logs
// nothing). The one definition of it: the loop's Emit and rank 0's commit reports
// (coordinator_reporter.h) use it.
bool StepIsLogged(const TrainerConfig& config, int64_t step);

// Runs config.steps optimizer steps. `model` must already be on the training device and wrapped
// by `backend`.
absl::StatusOr<TrainSummary> RunTraining(const TrainerConfig& config, models::LanguageModel& model,
                                         TrainingBackend& backend,
                                         const data::TokenDataset& dataset,
                                         const TrainLoopOptions& options);

}  // namespace shardline::trainer

#endif  // SHARDLINE_TRAINER_TRAIN_LOOP_H_
