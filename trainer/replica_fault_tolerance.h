// ReplicaFaultTolerance: the StepGate (trainer/step_gate.h) of a job with fault_tolerance mode
// REPLICA_GROUPS (docs/failures.md, "Replica-group fault tolerance"). It owns this rank's
// communicators, per membership epoch, and acts on the coordinator's decisions (StepVoter):
//
//   a failed try   the engine drops the step's gradients and is pointed at placeholder
//                  communicators (no sockets); the epoch's communicators are destroyed at once,
//                  so peers blocked in a collective with this rank fail fast; vote not ok
//   COMMIT         (the loop steps the optimizer); a new epoch: AfterCommit builds its
//                  communicators and, when groups join, runs the heal broadcast over each
//                  replicate group from heal_source_group's rank: parameter shards, optimizer
//                  state, then [optimizer step, step, data epoch, data position] (and with
//                  float16 loss scaling the scaler's state)
//   ABORT          drop gradients, build the communicators of the decision's epoch and live
//                  groups; logs "step N aborted: <error>; training it again with replica groups
//                  [0, 2] (epoch E)" (after the update: "the work after step N aborted: ...;
//                  doing it again with ...")
//   LEAVE          logs "left the job: replica group G was lost"; left() turns true (the trainer
//                  exits kExitLeftReplicaGroup)
//
// Communicators of epoch e bootstrap under "<comm key prefix>/ft/e<e>" (and ".../a<k>" for the
// k-th rebuild within one epoch, after an ABORT that kept the epoch); epoch 0's are the
// attempt's usual ones, handed to Create. After each build, checkpoints are written by the
// lowest live group (TrainerCheckpointing::SetMembership).
//
// A replacement rank (SHARDLINE_RANK_GENERATION >= 1) builds its backend over
// PlaceholderGroups, then Join() votes joining until admitted, builds the epoch's
// communicators, receives the heal and returns where to continue; it logs "healed from replica
// group H at step N".
//
// Dropout: BeginStep reseeds LibTorch's generator from (seed, rank, step), so a step trained
// again, or by a replacement, draws the same.
//
// Thread safety: training thread only.
#ifndef SHARDLINE_TRAINER_REPLICA_FAULT_TOLERANCE_H_
#define SHARDLINE_TRAINER_REPLICA_FAULT_TOLERANCE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "fsdp/comm_groups.h"
#include "fsdp/kv_store.h"
#include "fsdp/layout.h"
#include "trainer/checkpointing.h"
#include "trainer/fsdp_backend.h"
#include "trainer/step_gate.h"
#include "trainer/step_voter.h"

namespace shardline::trainer {

struct ReplicaFaultToleranceOptions {
  fsdp::ParallelLayout layout;
  int rank = 0;
  uint64_t seed = 0;           // train.seed
  int digest_every_steps = 0;  // fault_tolerance.digest_every_steps
  // The attempt's communicator options; key_prefix is its usual prefix (epochs go under it).
  fsdp::CommOptions comm;
  fsdp::KvStore* store = nullptr;  // Borrowed.
  StepVoter* voter = nullptr;      // Borrowed.
  at::DeviceType device = at::kCPU;
  // Optional: polled by Join between votes (a stop signal while waiting to be admitted).
  std::function<bool()> should_stop;
};

// Where a replacement continues after its heal.
struct JoinPoint {
  int64_t steps_done = 0;  // Optimizer steps completed: train from steps_done + 1.
  int64_t data_epoch = 0, data_position = 0;
};

class ReplicaFaultTolerance : public StepGate {
 public:
  // No-op communicators of this rank's shapes (world W, shard S, replicate R): what a backend
  // is built over before it has real ones (a replacement) and is pointed at after a failure.
  static fsdp::CommGroups PlaceholderGroups(const fsdp::ParallelLayout& layout, int rank,
                                            at::DeviceType device);

  // `initial`: the communicators `backend` uses now (epoch 0's, or PlaceholderGroups for a
  // replacement, which must Join before training). backend and checkpointing (may be null) are
  // borrowed. Errors: INVALID_ARGUMENT for a null store, voter or backend.
  static absl::StatusOr<std::unique_ptr<ReplicaFaultTolerance>> Create(
      const ReplicaFaultToleranceOptions& options, FsdpBackend* backend,
      TrainerCheckpointing* checkpointing, fsdp::CommGroups initial, bool joining);

  // A replacement: see the header comment. Errors: the vote's; UNAVAILABLE when told to LEAVE
  // (left() is true) or when the heal fails (the communicators' errors); CANCELLED when
  // should_stop turned true while waiting.
  absl::StatusOr<JoinPoint> Join();

  void BeginStep(int64_t step) override;
  absl::Status broken() const override { return broken_; }
  absl::StatusOr<StepDecision> EndStep(int64_t step, const absl::Status& trained, double loss,
                                       bool after_step_follows) override;
  absl::StatusOr<StepDecision> EndAfterStep(int64_t step) override;
  absl::Status AfterCommit(int64_t step, int64_t data_epoch, int64_t data_position) override;
  bool MarkBroken(const absl::Status& s) override;
  bool leader() const override;
  bool left() const override { return left_; }

  int64_t epoch() const { return epoch_; }
  const std::vector<int>& live_groups() const { return live_; }

 private:
  ReplicaFaultTolerance(const ReplicaFaultToleranceOptions& options, FsdpBackend* backend,
                        TrainerCheckpointing* checkpointing, fsdp::CommGroups initial);
  int own_group() const { return options_.layout.ReplicateIndex(options_.rank); }
  // Drops the step, points the backend at the placeholders and destroys the communicators;
  // `abandon` (after a failure, an ABORT or a LEAVE) first gives them up (Communicator::Abandon:
  // no closing handshake with peers that may be gone or blocked). A membership change after a
  // COMMIT (a heal) closes them gracefully: every peer finished the step's collectives.
  void TearDown(bool abandon);
  // TearDown(abandon), then the communicators of (epoch, live). A failed build is recorded in
  // broken_ (the next vote says not ok) and returned.
  absl::Status Rebuild(int64_t epoch, const std::vector<int>& live, bool abandon = false);
  // Casts `ballot` (epoch and ok filled in here) and acts on the decision: LEAVE tears down,
  // ABORT rebuilds for the decision's epoch, COMMIT remembers a membership change for
  // AfterCommit. `what` names the vote in logs ("step 5", "the work after step 5").
  absl::StatusOr<StepDecision> Decide(StepBallot ballot, const std::string& what);
  // Over the replicate group, from heal_source_group's rank: state and progress.
  absl::Status Heal(const StepDecision& d, std::vector<int64_t>* progress);

  const ReplicaFaultToleranceOptions options_;
  FsdpBackend* backend_;
  TrainerCheckpointing* checkpointing_;
  fsdp::CommGroups placeholders_;
  fsdp::CommGroups current_;
  bool current_is_placeholder_ = false;
  int64_t epoch_ = 0;
  int builds_in_epoch_ = 1;  // Epoch 0's communicators exist at Create.
  std::vector<int> live_;
  absl::Status broken_;
  std::optional<uint64_t> digest_;
  std::optional<StepDecision> pending_;  // A COMMIT that changed the membership.
  bool left_ = false;
};

}  // namespace shardline::trainer

#endif  // SHARDLINE_TRAINER_REPLICA_FAULT_TOLERANCE_H_
