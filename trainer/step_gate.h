// StepGate: what the training loop (trainer/train_loop.h) asks of replica-group fault tolerance
// (fault_tolerance REPLICA_GROUPS; docs/failures.md, "Replica-group fault tolerance") at each
// step. Without a gate the loop is the plain one. ReplicaFaultTolerance
// (trainer/replica_fault_tolerance.h) is the gate of a real job; tests use fakes.
//
// Per step N (1-based), as the loop calls it:
//   BeginStep(N)                      reseed (per seed, rank, step), digest every K steps
//   if broken() is OK: forward/backward of this rank's micro-batches
//   decision = EndStep(N, status, loss, after_step_follows)
//                                     a failure tears the communicators down first; vote
//     ABORT: the gate rebuilt the communicators; the loop rewinds its sampler to the step's
//            start and trains step N again (BeginStep again)
//     LEAVE: the loop ends (left() is true)
//     COMMIT: optimizer step; loss = decision.loss; then, when the step has work after its
//            update (after_step_follows: evaluation, the final sample, a checkpoint save):
//   do that work (a failed collective there: MarkBroken, the rest is skipped)
//   decision = EndAfterStep(N)        vote on it
//     ABORT: the gate rebuilt the communicators; the loop does the work again
//     LEAVE: the loop ends
//     COMMIT: logs; then
//   AfterCommit(N, next cursor)       a new membership: rebuild, heal the joiners
//
// Thread safety: training thread only.
#ifndef SHARDLINE_TRAINER_STEP_GATE_H_
#define SHARDLINE_TRAINER_STEP_GATE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "trainer/step_voter.h"

namespace shardline::trainer {

class StepGate {
 public:
  virtual ~StepGate() = default;
  // Before each try of `step`.
  virtual void BeginStep(int64_t step) = 0;
  // Not OK: this rank's communicators failed (with this error) since they were built; the loop
  // does not train and votes not ok.
  virtual absl::Status broken() const = 0;
  // After a try: `trained` is its status, `loss` this rank's mean loss (when trained);
  // `after_step_follows`: EndAfterStep(step) follows a COMMIT (replacements are admitted there,
  // not here). Votes and acts on the decision (see above). Errors: the vote's (no decision at
  // all), or a decision this rank cannot act on; the loop ends with them.
  virtual absl::StatusOr<StepDecision> EndStep(int64_t step, const absl::Status& trained,
                                               double loss, bool after_step_follows) = 0;
  // After the work that follows committed step `step`'s update, done or cut short by a broken
  // communicator (broken() says which): votes whether every member finished it and acts on
  // the decision as EndStep does. Errors: as EndStep's.
  virtual absl::StatusOr<StepDecision> EndAfterStep(int64_t step) = 0;
  // After a committed step's update and the work after it.
  virtual absl::Status AfterCommit(int64_t step, int64_t data_epoch, int64_t data_position) = 0;
  // A collective outside the step (evaluation, sampling, a checkpoint) failed with `s`. True
  // when it is a communication failure, now recorded in broken() (EndAfterStep votes not ok);
  // false otherwise (the caller fails with it).
  virtual bool MarkBroken(const absl::Status& s) = 0;
  // Whether this rank logs for the job: the first rank of the lowest live replica group.
  virtual bool leader() const = 0;
  // The decision was LEAVE.
  virtual bool left() const = 0;
};

}  // namespace shardline::trainer

#endif  // SHARDLINE_TRAINER_STEP_GATE_H_
