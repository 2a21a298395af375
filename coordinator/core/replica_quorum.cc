#include "coordinator/core/replica_quorum.h"

#include <algorithm>
#include <iterator>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace shardline::coordinator {
namespace {

// Decisions kept for late or retried voters.
constexpr size_t kKeptDecisions = 16;

StepVoteResponse Leave(const StepVoteRequest& req) {
  StepVoteResponse r;
  r.set_decision(StepVoteResponse::LEAVE);
  r.set_step(req.step());
  r.set_phase(req.phase());
  return r;
}

std::tuple<int64_t, int64_t, int> DecisionKey(int64_t epoch, int64_t step,
                                              StepVoteRequest::Phase phase) {
  return {epoch, step, static_cast<int>(phase)};
}

}  // namespace

std::string StepVoteName(int64_t step, StepVoteRequest::Phase phase) {
  return phase == StepVoteRequest::AFTER_STEP ? absl::StrCat("the work after step ", step)
                                              : absl::StrCat("step ", step);
}

void QuorumActions::Append(QuorumActions o) {
  lost.insert(lost.end(), o.lost.begin(), o.lost.end());
  stop_ranks.insert(stop_ranks.end(), o.stop_ranks.begin(), o.stop_ranks.end());
  if (o.healed) healed = std::move(o.healed);
  if (!o.attempt_failure.empty()) attempt_failure = std::move(o.attempt_failure);
  if (!o.diverged.empty()) diverged = std::move(o.diverged);
  decided |= o.decided;
  membership_changed |= o.membership_changed;
}

ReplicaQuorum::ReplicaQuorum(const fsdp::ParallelLayout& layout, int32_t min_replicas,
                             absl::Duration vote_timeout, absl::Duration stall_timeout,
                             int64_t last_step)
    : layout_(layout),
      min_replicas_(std::max(1, min_replicas)),
      vote_timeout_(vote_timeout),
      stall_timeout_(stall_timeout),
      last_step_(last_step),
      state_(layout.replicate_degree(), State::kLive),
      generation_(layout.world_size(), 0) {
  const fsdp::LiveGroups all = fsdp::LiveGroups::All(layout_);
  live_.insert(all.groups().begin(), all.groups().end());
}

void ReplicaQuorum::Restore(int64_t epoch, const std::vector<int32_t>& live_groups,
                            const std::vector<int32_t>& generations) {
  epoch_ = epoch;
  live_.clear();
  std::fill(state_.begin(), state_.end(), State::kLost);
  for (int32_t g : live_groups) {
    if (g < 0 || g >= layout_.replicate_degree()) continue;
    live_.insert(g);
    state_[g] = State::kLive;
  }
  for (size_t i = 0; i < generations.size() && i < generation_.size(); ++i) {
    generation_[i] = generations[i];
  }
}

std::string ReplicaQuorum::Fail(const std::string& why) {
  failed_ = true;
  return why;
}

int32_t ReplicaQuorum::LowestLive(const std::set<int32_t>& except) const {
  for (int32_t g : live_) {
    if (!except.count(g)) return g;
  }
  return live_.empty() ? 0 : *live_.begin();
}

std::string ReplicaQuorum::OpenVoteName() const { return StepVoteName(open_step_, open_phase_); }

StepVoteResponse ReplicaQuorum::Current(StepVoteResponse::Decision d, int64_t step,
                                        StepVoteRequest::Phase phase) const {
  StepVoteResponse r;
  r.set_decision(d);
  r.set_step(step);
  r.set_phase(phase);
  r.set_epoch(epoch_);
  for (int32_t g : live_) r.add_live_groups(g);
  r.set_heal_source_group(LowestLive({}));
  return r;
}

std::optional<StepVoteResponse> ReplicaQuorum::Answer(const StepVoteRequest& req) const {
  const int32_t rank = req.rank();
  if (rank < 0 || rank >= layout_.world_size()) return std::nullopt;
  const int32_t g = layout_.ReplicateIndex(rank);
  if (failed_ || req.generation() < generation_[rank]) return Leave(req);
  if (req.joining()) {
    auto it = admitted_.find(g);
    if (it != admitted_.end() && it->second.first == req.generation()) return it->second.second;
    if (state_[g] != State::kReplacing) return Leave(req);
    return std::nullopt;
  }
  if (state_[g] != State::kLive) return Leave(req);
  if (auto it = decided_.find(DecisionKey(req.epoch(), req.step(), req.phase()));
      it != decided_.end()) {
    return it->second;
  }
  // An older epoch's vote on a step not decided in it (a loss between steps started a new
  // epoch), or an epoch this coordinator never had (it restarted): train the step again under
  // the current epoch.
  if (req.epoch() != epoch_) return Current(StepVoteResponse::ABORT, req.step(), req.phase());
  return std::nullopt;
}

absl::StatusOr<ReplicaQuorum::VoteResult> ReplicaQuorum::Vote(const StepVoteRequest& req,
                                                              absl::Time now) {
  const int32_t rank = req.rank();
  if (rank < 0 || rank >= layout_.world_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank: ", rank, " outside world of ", layout_.world_size()));
  }
  if (!StepVoteRequest::Phase_IsValid(req.phase())) {
    return absl::InvalidArgumentError(
        absl::StrCat("phase: ", static_cast<int>(req.phase()), " is not TRAIN or AFTER_STEP"));
  }
  if (req.generation() > generation_[rank]) {
    return absl::FailedPreconditionError(
        absl::StrCat("rank ", rank, " generation ", req.generation(),
                     " was never placed (the current generation is ", generation_[rank], ")"));
  }
  VoteResult result;
  const int32_t g = layout_.ReplicateIndex(rank);
  if (!failed_ && req.generation() == generation_[rank]) {
    if (req.joining()) {
      if (state_[g] == State::kReplacing) joined_[g].insert(rank);
    } else if (state_[g] == State::kLive && req.epoch() == epoch_ &&
               !decided_.count(DecisionKey(req.epoch(), req.step(), req.phase()))) {
      if (open_step_ == 0) {
        open_step_ = req.step();
        open_phase_ = req.phase();
        after_step_follows_ = false;
      }
      if (req.step() != open_step_ || req.phase() != open_phase_) {
        return absl::FailedPreconditionError(absl::StrCat(
            "rank ", rank, " voted on ", StepVoteName(req.step(), req.phase()), " while ",
            OpenVoteName(), " is being decided in membership epoch ", epoch_));
      }
      if (req.phase() == StepVoteRequest::TRAIN && req.after_step_follows()) {
        after_step_follows_ = true;
      }
      if (!first_vote_) first_vote_ = now;
      if (votes_.emplace(rank, req).second && !req.ok() && !first_failure_) first_failure_ = now;
      TryDecide(now, &result.actions);
    }
  }
  result.answer = Answer(req);
  return result;
}

QuorumActions ReplicaQuorum::RankFailed(int32_t rank, int32_t generation, const std::string& cause,
                                        absl::Time now) {
  QuorumActions out;
  if (failed_ || rank < 0 || rank >= layout_.world_size() || generation < generation_[rank]) {
    return out;
  }
  const int32_t g = layout_.ReplicateIndex(rank);
  if (state_[g] == State::kLive) {
    LoseGroup(g, cause, now, &out);
  } else if (state_[g] == State::kReplacing) {
    // The replacement failed before it was admitted: place another.
    state_[g] = State::kLost;
    joined_.erase(g);
    for (int32_t r : layout_.RanksOfGroup(g)) out.stop_ranks.push_back(r);
    out.lost.push_back({g, open_step_ ? open_step_ : last_committed_ + 1,
                        absl::StrCat("its replacement failed before it rejoined: ", cause),
                        static_cast<int32_t>(live_.size() - lost_in_step_.size())});
  }
  return out;
}

void ReplicaQuorum::LoseGroup(int32_t g, const std::string& cause, absl::Time now,
                              QuorumActions* out) {
  state_[g] = State::kLost;
  joined_.erase(g);
  admitted_.erase(g);
  for (int32_t r : layout_.RanksOfGroup(g)) out->stop_ranks.push_back(r);
  const int64_t step = open_step_ ? open_step_ : last_committed_ + 1;
  if (open_step_) {
    lost_in_step_.insert(g);
    if (!first_failure_) first_failure_ = now;
  } else {
    live_.erase(g);
    ++epoch_;
    out->membership_changed = true;
    out->decided = true;  // waiters of the old epoch get ABORT
  }
  const int32_t left = static_cast<int32_t>(live_.size() - lost_in_step_.size());
  out->lost.push_back({g, step, cause, left});
  if (left < min_replicas_) {
    out->attempt_failure = Fail(absl::StrCat("only ", left, " of ", layout_.replicate_degree(),
                                             " replica groups left, fewer than "
                                             "fault_tolerance.min_replicas ",
                                             min_replicas_));
    out->decided = true;
    return;
  }
  if (open_step_) TryDecide(now, out);
}

QuorumActions ReplicaQuorum::Tick(absl::Time now) {
  QuorumActions out;
  if (!failed_) TryDecide(now, &out);
  return out;
}

void ReplicaQuorum::TryDecide(absl::Time now, QuorumActions* out) {
  if (open_step_ == 0 || failed_) return;
  bool all_in = true;
  bool any_failed = !lost_in_step_.empty();
  std::vector<int32_t> missing;
  for (int32_t g : live_) {
    if (lost_in_step_.count(g)) continue;
    for (int32_t r : layout_.RanksOfGroup(g)) {
      auto v = votes_.find(r);
      if (v == votes_.end()) {
        all_in = false;
        missing.push_back(r);
      } else if (!v->second.ok()) {
        any_failed = true;
      }
    }
  }
  // A step nobody failed whose missing voters are past stall_timeout: they stalled after their
  // collectives (their peers finished them and voted ok), so no failure starts vote_timeout.
  const bool silent_stall = !any_failed && !all_in && stall_timeout_ > absl::ZeroDuration() &&
                            first_vote_ && now >= *first_vote_ + stall_timeout_;
  if (!any_failed && !silent_stall) {
    if (all_in) Commit(out);
    return;
  }
  if (!silent_stall && !all_in && !(first_failure_ && now >= *first_failure_ + vote_timeout_)) {
    return;
  }
  const int64_t step = open_step_;
  // Stalled: no vote within vote_timeout of the step's first failure (or, in a step nobody
  // failed, within stall_timeout of its first vote).
  std::set<int32_t> stalled;
  for (int32_t r : missing) stalled.insert(layout_.ReplicateIndex(r));
  for (int32_t g : stalled) {
    int32_t first_missing = -1;
    for (int32_t r : missing) {
      if (layout_.ReplicateIndex(r) == g) {
        first_missing = r;
        break;
      }
    }
    state_[g] = State::kLost;
    joined_.erase(g);
    admitted_.erase(g);
    lost_in_step_.insert(g);
    for (int32_t r : layout_.RanksOfGroup(g)) out->stop_ranks.push_back(r);
    out->lost.push_back(
        {g, step,
         silent_stall ? absl::StrCat("rank ", first_missing, " did not vote on ", OpenVoteName(),
                                     " within ", absl::FormatDuration(stall_timeout_),
                                     " of the step's first vote (fsdp.collective_timeout_s"
                                     " + fault_tolerance.vote_timeout_s; stalled)")
                      : absl::StrCat("rank ", first_missing, " did not vote on ", OpenVoteName(),
                                     " within fault_tolerance.vote_timeout_s ",
                                     absl::FormatDuration(vote_timeout_),
                                     " of the step's first failure (stalled)"),
         static_cast<int32_t>(live_.size() - lost_in_step_.size())});
  }
  const int64_t voted_epoch = epoch_;
  const StepVoteRequest::Phase phase = open_phase_;
  for (int32_t g : lost_in_step_) live_.erase(g);
  ++epoch_;
  open_step_ = 0;
  votes_.clear();
  lost_in_step_.clear();
  first_failure_.reset();
  first_vote_.reset();
  out->decided = true;
  out->membership_changed = true;
  if (static_cast<int32_t>(live_.size()) < min_replicas_) {
    out->attempt_failure = Fail(absl::StrCat(
        "only ", live_.size(), " of ", layout_.replicate_degree(),
        " replica groups left, fewer than fault_tolerance.min_replicas ", min_replicas_));
    return;
  }
  decided_[DecisionKey(voted_epoch, step, phase)] = Current(StepVoteResponse::ABORT, step, phase);
  while (decided_.size() > kKeptDecisions) decided_.erase(decided_.begin());
}

void ReplicaQuorum::Commit(QuorumActions* out) {
  const int64_t step = open_step_;
  // Digests: the ranks holding the same shard index must agree.
  std::map<int32_t, std::pair<uint64_t, int32_t>> by_shard;  // shard index -> (digest, rank)
  double sum = 0;
  for (const auto& [rank, v] : votes_) {
    sum += v.loss();
    if (!v.has_digest()) continue;
    const int32_t shard = layout_.ShardIndex(rank);
    auto [it, inserted] = by_shard.emplace(shard, std::make_pair(v.digest(), rank));
    if (!inserted && it->second.first != v.digest()) {
      out->diverged = Fail(
          absl::StrCat("replica groups diverged at step ", step, ": shard ", shard, " has digest ",
                       absl::Hex(it->second.first, absl::kZeroPad16), " on rank ",
                       it->second.second, " (group ", layout_.ReplicateIndex(it->second.second),
                       ") but ", absl::Hex(v.digest(), absl::kZeroPad16), " on rank ", rank,
                       " (group ", layout_.ReplicateIndex(rank), ")"));
      out->decided = true;
      return;
    }
  }
  const int64_t voted_epoch = epoch_;
  const StepVoteRequest::Phase phase = open_phase_;
  // Joiners are admitted at a step's last vote (one that joined between the update and the
  // evaluation or save would be missing from their collectives), and not at the job's last step.
  const bool admits = (phase == StepVoteRequest::AFTER_STEP || !after_step_follows_) &&
                      (last_step_ <= 0 || step < last_step_);
  std::vector<int32_t> joining;
  for (const auto& [g, ranks] : joined_) {
    if (admits && state_[g] == State::kReplacing &&
        static_cast<int32_t>(ranks.size()) == layout_.shard_degree()) {
      joining.push_back(g);
    }
  }
  const int32_t source = LowestLive({});
  if (!joining.empty()) {
    for (int32_t g : joining) {
      state_[g] = State::kLive;
      live_.insert(g);
      joined_.erase(g);
    }
    ++epoch_;
    out->membership_changed = true;
    out->healed = QuorumActions::Heal{joining, step, source};
  }
  StepVoteResponse resp = Current(StepVoteResponse::COMMIT, step, phase);
  resp.set_loss(votes_.empty() ? 0.0 : sum / static_cast<double>(votes_.size()));
  for (int32_t g : joining) resp.add_joining_groups(g);
  resp.set_heal_source_group(source);
  for (int32_t g : joining) admitted_[g] = {generation_[layout_.RankOf(g, 0)], resp};
  decided_[DecisionKey(voted_epoch, step, phase)] = resp;
  while (decided_.size() > kKeptDecisions) decided_.erase(decided_.begin());
  if (phase == StepVoteRequest::TRAIN) last_committed_ = step;
  open_step_ = 0;
  votes_.clear();
  first_failure_.reset();
  first_vote_.reset();
  out->decided = true;
}

std::vector<int32_t> ReplicaQuorum::GroupsToReplace() const {
  std::vector<int32_t> out;
  if (failed_) return out;
  for (int32_t g = 0; g < layout_.replicate_degree(); ++g) {
    if (state_[g] == State::kLost) out.push_back(g);
  }
  return out;
}

int32_t ReplicaQuorum::ReplacementPlaced(int32_t g) {
  state_[g] = State::kReplacing;
  joined_.erase(g);
  admitted_.erase(g);
  for (int32_t r : layout_.RanksOfGroup(g)) ++generation_[r];
  return generation_[layout_.RankOf(g, 0)];
}

std::vector<int32_t> ReplicaQuorum::UnadmittedRanks() const {
  std::vector<int32_t> out;
  for (int32_t g = 0; g < layout_.replicate_degree(); ++g) {
    if (state_[g] != State::kReplacing) continue;
    for (int32_t r : layout_.RanksOfGroup(g)) out.push_back(r);
  }
  return out;
}

}  // namespace shardline::coordinator
