// CoordinatorStepVoter: the StepVoter (trainer/step_voter.h) over the coordinator's StepVote RPC
// (client/client.h), with the attempt credential as the bearer token. The coordinator holds
// a vote up to about 20 s; DEADLINE_EXCEEDED ("no decision yet") sends the same vote again at
// once, UNAVAILABLE (a coordinator restarting or unreachable) retries with exponential backoff
// and jitter, for up to `patience` in all. Torch-free.
//
// Thread safety: Vote from one thread at a time.
#ifndef SHARDLINE_TRAINER_COORDINATOR_STEP_VOTER_H_
#define SHARDLINE_TRAINER_COORDINATOR_STEP_VOTER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "trainer/step_voter.h"

namespace shardline::trainer {

struct CoordinatorStepVoterOptions {
  std::string address;  // $SHARDLINE_COORDINATOR
  std::string token;    // The attempt credential ($SHARDLINE_RDZV_SECRET).
  std::string job_id;
  int attempt = 0;
  int rank = 0;
  int generation = 0;  // $SHARDLINE_RANK_GENERATION
  // How long one vote may go unanswered (no decision yet, or the coordinator unreachable)
  // before Vote gives up with the last error.
  absl::Duration patience = absl::Minutes(10);
};

// The client's TLS comes from the environment (client/client_tls.h). Errors: the client's
// creation errors.
absl::StatusOr<std::unique_ptr<StepVoter>> MakeCoordinatorStepVoter(
    const CoordinatorStepVoterOptions& options);

}  // namespace shardline::trainer

#endif  // SHARDLINE_TRAINER_COORDINATOR_STEP_VOTER_H_
