// ReplicaQuorum: the per-step vote of one running attempt of a fault_tolerance REPLICA_GROUPS
// job (docs/failures.md, "Replica-group fault tolerance"): which replica groups are members of
// the current membership epoch, the votes of the step being decided, and the decisions.
//
// Replica group g is the layout's shard group g (fsdp/layout.h: its S ranks). A group is
//   live       a member of the current epoch (every group at epoch 0);
//   lost       failed (a rank exited, was lost with its worker, or stalled past vote_timeout),
//              waiting for the core to place a replacement;
//   replacing  a replacement is placed (its ranks' generation went up by one); its ranks send
//              joining votes, and once all S did, the next COMMIT admits it.
// A step is voted in one or two phases: TRAIN (forward, backward, reduction; COMMIT applies the
// update), then, when the step has evaluation, a sample or a checkpoint save (the TRAIN votes say
// after_step_follows), AFTER_STEP (that work finished everywhere). A vote is identified by
// (epoch, step, phase); "the step" below is that vote.
// Rules: COMMIT when every member voted ok for (epoch, step) (loss: the mean of their losses;
// ready joiners are admitted at the step's last phase, before the job's last step: new epoch,
// joining_groups, heal_source_group = lowest live group that is not joining). ABORT once a member
// voted not ok or a member's group was lost, and then every other member voted or vote_timeout
// passed since the step's first failure (the missing voters' groups are lost, stalled). A member
// that stalls after its collectives finished makes no peer fail: when members are still missing
// stall_timeout after the step's first vote of any kind (the trainer's collective timeout +
// vote_timeout), their groups are lost too and the step is aborted. Every ABORT starts a new epoch
// without the lost groups, so the ranks rebuild their communicators under a fresh rendezvous
// prefix. A loss between steps (no vote open) starts the new epoch at once; votes of the old epoch
// then get ABORT. Fewer live groups than min_replicas: the attempt fails (the core restarts it as
// without fault tolerance). With digests, the members holding the same shard index must agree at
// COMMIT, else the replicas diverged (REPLICAS_DIVERGED). Repeated votes are idempotent; a decided
// step's decision is answered again to a late or retried voter; a rank of a lost group (or an older
// generation of a replaced rank) is answered LEAVE.
//
// Pure: it takes the time as an argument and RETURNS what the core must do (events, ranks to
// stop, attempt failure) instead of doing it. Thread safety: none; the core calls it under its
// mutex.
#ifndef SHARDLINE_COORDINATOR_CORE_REPLICA_QUORUM_H_
#define SHARDLINE_COORDINATOR_CORE_REPLICA_QUORUM_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "fsdp/layout.h"
#include "proto/coordinator.pb.h"

namespace shardline::coordinator {

// "step N" or "the work after step N": how events and errors name the vote on (step, phase).
std::string StepVoteName(int64_t step, StepVoteRequest::Phase phase);

// What the core must do after a quorum call.
struct QuorumActions {
  struct Loss {
    int32_t group = 0;
    int64_t step = 0;        // the step it was lost at (the open one, else the next)
    std::string cause;       // why (the rank's exit, the stall)
    int32_t live_after = 0;  // live groups left without it
  };
  std::vector<Loss> lost;           // REPLICA_GROUP_LOST events, in order
  std::vector<int32_t> stop_ranks;  // STOP_RANK these ranks (the lost groups')
  struct Heal {
    std::vector<int32_t> groups;
    int64_t step = 0;
    int32_t source = 0;
  };
  std::optional<Heal> healed;  // REPLICA_GROUP_HEALED
  // Non-empty: the attempt fails (fewer than min_replicas live groups); says why.
  std::string attempt_failure;
  // Non-empty: REPLICAS_DIVERGED (the job fails); says which shard and ranks.
  std::string diverged;
  bool decided = false;             // a decision was made (or the quorum failed): wake the voters
  bool membership_changed = false;  // epoch or live groups changed: persist them

  void Append(QuorumActions other);
};

class ReplicaQuorum {
 public:
  // The R replica groups of `layout` (R >= 1); min_replicas >= 1. stall_timeout: how long
  // after a step's first vote the missing votes of a step nobody failed are awaited (0 or less:
  // collective-less stalls are never declared; tests).
  // last_step: the job's last step (train.steps; 0: unknown), at which no joiner is admitted:
  // training is over, the replacement is stopped with the job instead of healed for nothing
  // (and the job's progress stays the live groups' last step).
  ReplicaQuorum(const fsdp::ParallelLayout& layout, int32_t min_replicas,
                absl::Duration vote_timeout, absl::Duration stall_timeout = absl::ZeroDuration(),
                int64_t last_step = 0);

  // A coordinator restart: the stored epoch, live groups and per-rank generations (other groups
  // count as lost, to be replaced).
  void Restore(int64_t epoch, const std::vector<int32_t>& live_groups,
               const std::vector<int32_t>& generations);

  // Records a vote (or a join) and decides what can be decided. `answer`: this voter's decision
  // when there is one now; else the core waits (and asks Answer again after each decision).
  // Errors: INVALID_ARGUMENT for a rank outside the world or an unknown phase,
  // FAILED_PRECONDITION for a generation
  // never placed or a step other than the one being voted in the epoch.
  struct VoteResult {
    std::optional<StepVoteResponse> answer;
    QuorumActions actions;
  };
  absl::StatusOr<VoteResult> Vote(const StepVoteRequest& req, absl::Time now);
  // The decision for this request, if any yet (LEAVE for lost groups and old generations).
  std::optional<StepVoteResponse> Answer(const StepVoteRequest& req) const;

  // Rank `rank` (process generation `generation`) failed: `cause` (an exit, lost worker, start
  // timeout). A current generation's failure loses its group (a replacement group's failure
  // sends it back to lost); an older generation's, or a lost group's, is expected: nothing.
  QuorumActions RankFailed(int32_t rank, int32_t generation, const std::string& cause,
                           absl::Time now);
  // Decides a step whose vote_timeout passed.
  QuorumActions Tick(absl::Time now);

  // Lost groups without a replacement, ascending.
  std::vector<int32_t> GroupsToReplace() const;
  // A replacement of lost group `group` was placed: its ranks' generation goes up by one;
  // returns the new generation.
  int32_t ReplacementPlaced(int32_t group);
  // Ranks of replacement groups not admitted yet.
  std::vector<int32_t> UnadmittedRanks() const;

  int64_t epoch() const { return epoch_; }
  std::vector<int32_t> live_groups() const { return {live_.begin(), live_.end()}; }
  // The current epoch's members (the live groups of the layout).
  fsdp::LiveGroups members() const { return fsdp::LiveGroups::Of(layout_, live_); }
  bool IsLive(int32_t group) const { return state_[group] == State::kLive; }
  int32_t generation(int32_t rank) const { return generation_[rank]; }
  const std::vector<int32_t>& generations() const { return generation_; }
  const fsdp::ParallelLayout& layout() const { return layout_; }
  // The attempt failed (too few groups, diverged): every vote is answered LEAVE.
  bool failed() const { return failed_; }

 private:
  enum class State { kLive, kLost, kReplacing };
  // Loses `group` (a member) with `cause`.
  void LoseGroup(int32_t group, const std::string& cause, absl::Time now, QuorumActions* out);
  void TryDecide(absl::Time now, QuorumActions* out);
  void Commit(QuorumActions* out);
  // The decision `d` under the current epoch for (step, phase).
  StepVoteResponse Current(StepVoteResponse::Decision d, int64_t step,
                           StepVoteRequest::Phase phase) const;
  // StepVoteName of the open vote.
  std::string OpenVoteName() const;
  int32_t LowestLive(const std::set<int32_t>& except) const;
  std::string Fail(const std::string& why);

  const fsdp::ParallelLayout layout_;
  const int32_t min_replicas_;
  const absl::Duration vote_timeout_;
  const absl::Duration stall_timeout_;
  const int64_t last_step_;

  int64_t epoch_ = 0;
  std::set<int32_t> live_;
  std::vector<State> state_;                     // by group
  std::vector<int32_t> generation_;              // by rank
  std::map<int32_t, std::set<int32_t>> joined_;  // replacing group -> ranks that sent a join
  // Admitted groups -> (generation, the COMMIT that admitted them), answered to their joiners.
  std::map<int32_t, std::pair<int32_t, StepVoteResponse>> admitted_;
  bool failed_ = false;

  // The step (and phase) being voted in epoch_ (0: none), its votes by rank, its lost groups,
  // and when it first failed. after_step_follows_: a TRAIN vote said an AFTER_STEP vote follows.
  int64_t open_step_ = 0;
  StepVoteRequest::Phase open_phase_ = StepVoteRequest::TRAIN;
  bool after_step_follows_ = false;
  int64_t last_committed_ = 0;
  std::map<int32_t, StepVoteRequest> votes_;
  std::set<int32_t> lost_in_step_;
  std::optional<absl::Time> first_failure_;
  std::optional<absl::Time> first_vote_;
  // Recent decisions by (epoch voted under, step, phase).
  std::map<std::tuple<int64_t, int64_t, int>, StepVoteResponse> decided_;
};

}  // namespace shardline::coordinator

#endif  // SHARDLINE_COORDINATOR_CORE_REPLICA_QUORUM_H_
