// Preemption of a training run (spec.scheduling.preemptible; coordinator_core_preemption.cc):
// the worker daemon's SIGUSR1 (Assignment PREEMPT) asks this trainer to save a checkpoint at its
// next step and wait there to be stopped. Every rank gets the signal, not at the same moment:
// the ranks agree on the step in that step's loss all-reduce (train_loop.cc), so they all save
// the same one. Its commit report says it was saved for the preemption
// (CheckpointReport.preempted), and the coordinator then stops the attempt and requeues the job.
//
// The daemon starts trainers with SIGUSR1 blocked (worker/rank_process.cc): a PREEMPT before
// InstallPreemptionHandler waits, pending, instead of killing the process.
//
// Thread safety: process-wide atomics; the handler only stores.
#ifndef SHARDLINE_TRAINER_PREEMPTION_H_
#define SHARDLINE_TRAINER_PREEMPTION_H_

#include <cstdint>
#include <functional>

#include "trainer/checkpointing.h"
#include "trainer/train_loop.h"

namespace shardline::trainer {

// Installs the SIGUSR1 handler, then unblocks SIGUSR1 in the calling thread (a pending one is
// delivered at once). Call from the main thread at start.
void InstallPreemptionHandler();
// Whether a SIGUSR1 arrived.
bool PreemptionRequested();
// The step the ranks agreed to save for the preemption (0: none yet).
void SetPreemptionStep(int64_t step);
int64_t PreemptionStep();

// Lets `loop` be preempted: it polls PreemptionRequested, and the agreed step is saved through
// `ckpt` (borrowed; TrainerCheckpointing::SaveAfter) and recorded (SetPreemptionStep).
void EnablePreemption(TrainerCheckpointing* ckpt, TrainLoopOptions& loop);

// The loop ended after `step`, saved for a preemption: waits for the save's commit report, then
// up to 10 minutes for a stop signal (`stop_signal()` turns non-zero; the coordinator sends the
// STOP on the commit). Returns the exit code: stopped by that signal, or, with no stop in time,
// a failure (the coordinator then restarts the job from that checkpoint, as after any failure).
int EndPreempted(TrainerCheckpointing* ckpt, int64_t step, const std::function<int()>& stop_signal);

}  // namespace shardline::trainer

#endif  // SHARDLINE_TRAINER_PREEMPTION_H_
