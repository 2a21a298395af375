// StepVoter: how a rank of a replica-group fault-tolerant job (fault_tolerance REPLICA_GROUPS;
// docs/failures.md, "Replica-group fault tolerance") asks the coordinator to decide a step. The
// training loop depends on this interface only, so it is tested with a fake voter; the real one
// is CoordinatorStepVoter (trainer/coordinator_step_voter.h, gRPC). Torch-free and proto-free:
// LibTorch's bundled protobuf headers shadow the coordinator's (trainer/BUILD).
//
// Thread safety: implementations are called from the training thread only.
#ifndef SHARDLINE_TRAINER_STEP_VOTER_H_
#define SHARDLINE_TRAINER_STEP_VOTER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace shardline::trainer {

// StepVoteRequest without the job's identity (job id, attempt, rank, generation: the voter's).
struct StepBallot {
  // What is voted on (StepVoteRequest.Phase): a step's training, or the work after its update.
  enum class Phase { kTrain, kAfterStep };
  int64_t epoch = 0;
  int64_t step = 0;  // The 1-based optimizer step that COMMIT applies.
  Phase phase = Phase::kTrain;
  // kTrain: a kAfterStep vote on this step follows (evaluation, sample or a checkpoint save).
  bool after_step_follows = false;
  bool ok = true;
  std::string error;  // Why not (not ok).
  double loss = 0;    // This rank's mean loss over its micro-batches (ok).
  bool joining = false;
  std::optional<uint64_t> digest;  // The state at the step's start (digest_every_steps).
};

// StepVoteResponse.
struct StepDecision {
  enum class Kind { kCommit, kAbort, kLeave };
  Kind kind = Kind::kCommit;
  int64_t step = 0;
  double loss = 0;  // COMMIT: the mean of the members' losses.
  int64_t epoch = 0;
  std::vector<int> live_groups;     // Ascending.
  std::vector<int> joining_groups;  // Admitted at this boundary: heal them.
  int heal_source_group = 0;
};

class StepVoter {
 public:
  virtual ~StepVoter() = default;
  // Blocks until the coordinator decided (retrying while it has no decision yet or cannot be
  // reached). Errors: a refusal of the coordinator, or no answer within the voter's patience.
  virtual absl::StatusOr<StepDecision> Vote(const StepBallot& ballot) = 0;
};

}  // namespace shardline::trainer

#endif  // SHARDLINE_TRAINER_STEP_VOTER_H_
