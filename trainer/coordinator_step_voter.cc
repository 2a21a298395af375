#include "trainer/coordinator_step_voter.h"

#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "client/client_tls.h"
#include "common/logging.h"
#include "common/retry.h"
#include "proto/coordinator.pb.h"

namespace shardline::trainer {
namespace {

class CoordinatorStepVoter : public StepVoter {
 public:
  CoordinatorStepVoter(const CoordinatorStepVoterOptions& options,
                       std::unique_ptr<client::CoordinatorClient> client)
      : options_(options), client_(std::move(client)) {}

  absl::StatusOr<StepDecision> Vote(const StepBallot& b) override {
    StepVoteRequest req;
    req.set_job_id(options_.job_id);
    req.set_attempt(options_.attempt);
    req.set_rank(options_.rank);
    req.set_generation(options_.generation);
    req.set_epoch(b.epoch);
    req.set_step(b.step);
    req.set_phase(b.phase == StepBallot::Phase::kAfterStep ? StepVoteRequest::AFTER_STEP
                                                           : StepVoteRequest::TRAIN);
    req.set_after_step_follows(b.after_step_follows);
    req.set_ok(b.ok);
    req.set_error(b.error);
    req.set_loss(b.loss);
    req.set_joining(b.joining);
    if (b.digest.has_value()) {
      req.set_has_digest(true);
      req.set_digest(*b.digest);
    }
    BackoffPolicy policy;
    policy.max_delay = absl::Seconds(5);
    policy.total = options_.patience;
    Backoff backoff(policy, std::random_device()());
    const absl::Time give_up = absl::Now() + options_.patience;
    absl::Status last;
    while (true) {
      absl::StatusOr<StepVoteResponse> resp = client_->StepVote(req, options_.token);
      if (resp.ok() && resp->decision() == StepVoteResponse::DECISION_UNSPECIFIED) {
        return absl::InternalError(
            absl::StrCat("vote on step ", b.step, ": the coordinator answered no decision"));
      }
      if (resp.ok()) return FromProto(*resp);
      last = resp.status();
      const bool again = last.code() == absl::StatusCode::kDeadlineExceeded;
      // UNAVAILABLE: the coordinator is restarting or unreachable; RESOURCE_EXHAUSTED: its
      // threads are busy. Anything else (the attempt is over, a bug) ends the wait.
      const bool retry = again || last.code() == absl::StatusCode::kUnavailable ||
                         last.code() == absl::StatusCode::kResourceExhausted;
      if (!retry || absl::Now() >= give_up) break;
      if (!again) {
        SL_LOG(WARNING) << "vote on step " << b.step << ": " << last.message() << "; retrying";
        absl::SleepFor(backoff.Next());
      }
    }
    return absl::Status(last.code(), absl::StrCat("vote on step ", b.step, " (epoch ", b.epoch,
                                                  "): ", last.message()));
  }

 private:
  static StepDecision FromProto(const StepVoteResponse& r) {
    StepDecision d;
    d.kind = r.decision() == StepVoteResponse::ABORT   ? StepDecision::Kind::kAbort
             : r.decision() == StepVoteResponse::LEAVE ? StepDecision::Kind::kLeave
                                                       : StepDecision::Kind::kCommit;
    d.step = r.step();
    d.loss = r.loss();
    d.epoch = r.epoch();
    d.live_groups.assign(r.live_groups().begin(), r.live_groups().end());
    d.joining_groups.assign(r.joining_groups().begin(), r.joining_groups().end());
    d.heal_source_group = r.heal_source_group();
    return d;
  }

  const CoordinatorStepVoterOptions options_;
  std::unique_ptr<client::CoordinatorClient> client_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<StepVoter>> MakeCoordinatorStepVoter(
    const CoordinatorStepVoterOptions& options) {
  auto client = client::ClientFromEnv(options.address, options.token);
  if (!client.ok()) return client.status();
  return std::unique_ptr<StepVoter>(new CoordinatorStepVoter(options, std::move(*client)));
}

}  // namespace shardline::trainer
