// CoordinatorCore's replica-group fault tolerance (docs/failures.md, "Replica-group fault
// tolerance"): each REPLICA_GROUPS attempt's quorum (replica_quorum.h), the StepVote call, rank
// failures that lose a replica group instead of the attempt, STOP_RANK of the group's other
// ranks, placement and START of replacement groups, and the job's success over its live groups.
// The class and its lock are coordinator_core.h's.
#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "coordinator/core/coordinator_core.h"
#include "coordinator/core/job_state_machine.h"
#include "coordinator/core/rank_reports.h"
#include "coordinator/placement/scheduler.h"
#include "fsdp/layout.h"

namespace shardline::coordinator {
namespace {

bool UsesReplicaGroups(const JobStatus& st) {
  return st.spec().fault_tolerance().mode() == FaultToleranceSpec::REPLICA_GROUPS;
}

// "rank 4" or "ranks 4-5": replica group `group`'s ranks, for events.
std::string GroupRanks(const fsdp::ParallelLayout& layout, int32_t group) {
  const std::vector<int> ranks = layout.RanksOfGroup(group);
  return ranks.size() == 1 ? absl::StrCat("rank ", ranks.front())
                           : absl::StrCat("ranks ", ranks.front(), "-", ranks.back());
}

void SetMembership(const ReplicaQuorum& q, JobStatus* st) {
  st->clear_live_replica_groups();
  for (int32_t g : q.live_groups()) st->add_live_replica_groups(g);
  st->set_membership_epoch(q.epoch());
}

}  // namespace

void CoordinatorCore::StartQuorumLocked(JobRecord& job, bool restored) {
  JobStatus& st = *job.mutable_status();
  if (!UsesReplicaGroups(st)) return;
  // The layout's groups are the replica groups. The job's stored shard degree divides its world
  // (the planner placed it); a record where it does not cannot run a quorum.
  absl::StatusOr<fsdp::ParallelLayout> layout =
      fsdp::ParallelLayout::ForShape(st.world_size(), std::max(1, job.shard_degree()));
  if (!layout.ok()) {
    SL_LOG(ERROR) << "job " << st.job_id() << ": no replica-group quorum: " << layout.status();
    quorums_.erase(st.job_id());
    return;
  }
  const FaultToleranceSpec& ft = st.spec().fault_tolerance();
  const absl::Duration vote_timeout =
      absl::Seconds(ft.vote_timeout_s() > 0 ? ft.vote_timeout_s() : 10);
  // A rank that stalls after its collectives finished fails no peer: its peers vote ok and wait.
  // It is declared stalled once it could not still be in a collective of the step.
  const absl::Duration stall_timeout =
      absl::Seconds(st.spec().fsdp().collective_timeout_s()) + vote_timeout;
  ReplicaQuorum q(*layout, ft.min_replicas(), vote_timeout, stall_timeout, st.total_steps());
  if (restored && st.live_replica_groups_size() > 0) {
    std::vector<int32_t> generations;
    for (const RankPlacement& p : st.placement()) generations.push_back(p.generation());
    q.Restore(st.membership_epoch(),
              {st.live_replica_groups().begin(), st.live_replica_groups().end()}, generations);
  }
  SetMembership(q, &st);
  quorums_.erase(st.job_id());
  quorums_.emplace(st.job_id(), std::move(q));
}

bool CoordinatorCore::QuorumTakesFailureLocked(JobRecord& job, const RankFailure& f) {
  auto it = quorums_.find(job.status().job_id());
  if (it == quorums_.end() || !f.restartable || f.ranks.empty()) return false;
  QuorumActions actions;
  for (int32_t rank : f.ranks) {
    if (rank < 0 || rank >= it->second.layout().world_size()) continue;
    actions.Append(
        it->second.RankFailed(rank, it->second.generation(rank), f.reason, clock_->Now()));
  }
  ApplyQuorumActionsLocked(job, std::move(actions), f.kind, f.reason);
  return true;
}

void CoordinatorCore::ApplyQuorumActionsLocked(JobRecord& job, QuorumActions actions,
                                               const std::string& kind, const std::string& reason) {
  const std::string job_id = job.status().job_id();
  auto it = quorums_.find(job_id);
  if (it == quorums_.end()) return;
  ReplicaQuorum& q = it->second;
  const fsdp::ParallelLayout& layout = q.layout();
  JobStateMachine sm(&job, clock_->Now());
  for (const QuorumActions::Loss& l : actions.lost) {
    sm.Note("REPLICA_GROUP_LOST",
            absl::StrCat("replica group ", l.group, " (", GroupRanks(layout, l.group),
                         ") lost at step ", l.step, ": ", l.cause, "; training on with ",
                         l.live_after, " of ", layout.replicate_degree(), " replica groups"));
    SL_LOG(WARNING) << "job " << job_id << ": replica group " << l.group << " lost at step "
                    << l.step << ": " << l.cause;
  }
  if (actions.healed) {
    for (int32_t g : actions.healed->groups) {
      sm.Note("REPLICA_GROUP_HEALED",
              absl::StrCat("replica group ", g, " (", GroupRanks(layout, g), ") rejoined at step ",
                           actions.healed->step, ", healed from group ", actions.healed->source));
    }
  }
  if (actions.decided) feed_.VotesChanged(job_id);  // the service's waiting votes
  if (!actions.diverged.empty()) {
    FailAttemptLocked(job, "REPLICAS_DIVERGED", actions.diverged, /*restartable=*/false);
    return;
  }
  if (!actions.attempt_failure.empty()) {
    FailAttemptLocked(job, kind, absl::StrCat(reason, "; ", actions.attempt_failure));
    return;
  }
  // The lost groups' ranks stop (whatever they exit with is expected now); their slots drain.
  if (!actions.stop_ranks.empty()) {
    tracker_.StopRanks(job_id, actions.stop_ranks);
    const JobStatus& st = job.status();
    for (int32_t rank : actions.stop_ranks) {
      if (rank < 0 || rank >= st.placement_size()) continue;
      const RankPlacement& p = st.placement(rank);
      if (!registry_.IsAlive(p.worker_id())) {
        registry_.ReleaseSlot(p.worker_id(), p.slot_index(), Namespace(job));
        continue;
      }
      outbox_.PushStopRank(p.worker_id(), job_id, st.attempt(), rank, p.generation());
      if (tracker_.IsAcked(job_id, rank)) {
        draining_.Hold(p.worker_id(), job_id, st.attempt(), rank, p.slot_index(), p.generation());
      } else {
        registry_.ReleaseSlot(p.worker_id(), p.slot_index(), Namespace(job));
      }
    }
  }
  if (actions.membership_changed || !actions.lost.empty() || actions.healed) {
    SetMembership(q, job.mutable_status());
    jobs_.Changed(job);
  }
  if (!actions.lost.empty()) MaybeSucceedReplicaGroupsLocked(job);
}

void CoordinatorCore::MaybeSucceedReplicaGroupsLocked(JobRecord& job) {
  const JobStatus& st = job.status();
  auto it = quorums_.find(st.job_id());
  if (it == quorums_.end() || st.state() != RUNNING) return;
  const ReplicaQuorum& q = it->second;
  const std::set<int32_t> done(job.succeeded_ranks().begin(), job.succeeded_ranks().end());
  const fsdp::LiveGroups live = q.members();
  const std::vector<int> ranks = live.Ranks();
  for (int32_t rank : ranks) {
    if (!done.count(rank)) return;
  }
  const std::string message =
      absl::StrCat("all ", ranks.size(), " ranks of the ", live.size(), " live of ",
                   q.layout().replicate_degree(), " replica groups of attempt ", st.attempt(),
                   " exited with code 0");
  // A replacement not admitted yet has nothing left to join: the attempt's STOP ends it, and
  // its slots drain until it exited (as a failed attempt's do), so no other job is placed on a
  // slot it still holds. The exited ranks' slots free at their workers' next heartbeats.
  const bool replacements_running = !q.UnadmittedRanks().empty();
  EndAttemptLocked(job, /*send_stop=*/replacements_running);
  (void)JobStateMachine(&job, clock_->Now()).Succeed(message);
  SL_LOG(INFO) << "job " << job.status().job_id() << " succeeded";
  jobs_.Changed(job);
}

void CoordinatorCore::PlaceReplacementsLocked() {
  for (auto& [job_id, q] : quorums_) {
    std::vector<int32_t> lost = q.GroupsToReplace();
    if (lost.empty()) continue;
    auto found = jobs_.Find(job_id);
    if (!found.ok() || (*found)->status().state() != RUNNING) continue;
    JobRecord& job = **found;
    JobStatus& st = *job.mutable_status();
    const int32_t s = q.layout().shard_degree();
    for (int32_t g : lost) {
      const std::vector<int> ranks = q.layout().RanksOfGroup(g);
      // Free slots of the job's kind, the failed node's worker first.
      std::vector<NodeCapacity> free = registry_.FreeCapacity(SlotKindFor(st.spec()));
      const std::string preferred = st.placement(ranks.front()).worker_id();
      std::stable_partition(free.begin(), free.end(),
                            [&](const NodeCapacity& c) { return c.worker_id == preferred; });
      std::vector<std::pair<const NodeCapacity*, int32_t>> slots;
      for (const NodeCapacity& c : free) {
        for (int32_t slot : c.free_slots) {
          if (static_cast<int32_t>(slots.size()) < s) slots.push_back({&c, slot});
        }
      }
      if (static_cast<int32_t>(slots.size()) < s) break;  // retried on the next pass
      bool reserved = true;
      for (int32_t i = 0; i < s && reserved; ++i) {
        absl::Status ok =
            registry_.Reserve(slots[i].first->worker_id, slots[i].second, Namespace(job));
        if (!ok.ok()) {
          for (int32_t j = 0; j < i; ++j) {
            registry_.ReleaseSlot(slots[j].first->worker_id, slots[j].second, Namespace(job));
          }
          reserved = false;
        }
      }
      if (!reserved) break;
      const int32_t generation = q.ReplacementPlaced(g);
      std::vector<std::string> nodes;
      for (int32_t i = 0; i < s; ++i) {
        const int32_t rank = ranks[i];
        RankPlacement& p = *st.mutable_placement(rank);
        const NodeCapacity& c = *slots[i].first;
        if (p.worker_id() != c.worker_id) {
          int32_t local = 0;
          for (const RankPlacement& o : st.placement()) local += o.worker_id() == c.worker_id;
          p.set_local_rank(local);
        }
        p.set_worker_id(c.worker_id);
        p.set_node_name(c.node_name);
        p.set_slot_index(slots[i].second);
        p.set_generation(generation);
        nodes.push_back(c.node_name);
        auto& done = *job.mutable_succeeded_ranks();
        done.erase(std::remove(done.begin(), done.end(), rank), done.end());
        tracker_.ReplaceRank(job_id, rank, c.worker_id, c.node_name, generation, clock_->Now());
      }
      const AttemptStartInfo info = StartInfoLocked(job);
      for (int32_t rank : ranks) outbox_.PushStart(job, info, rank);
      nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
      JobStateMachine(&job, clock_->Now())
          .Note("REPLICA_GROUP_PLACED",
                absl::StrCat("replacement of replica group ", g, " (", GroupRanks(q.layout(), g),
                             ", generation ", generation, ") placed on ",
                             absl::StrJoin(nodes, ", "), "; it rejoins at a committed step"));
      SL_LOG(INFO) << "job " << job_id << ": replacement of replica group " << g << " (generation "
                   << generation << ") placed";
      jobs_.Changed(job);
    }
  }
}

void CoordinatorCore::TickQuorumsLocked() {
  std::vector<std::string> ids;
  for (const auto& [id, q] : quorums_) ids.push_back(id);
  for (const std::string& id : ids) {
    auto it = quorums_.find(id);
    auto job = jobs_.Find(id);
    if (it == quorums_.end() || !job.ok()) continue;
    ApplyQuorumActionsLocked(**job, it->second.Tick(clock_->Now()), "RANK_STALLED",
                             "a rank did not vote within fault_tolerance.vote_timeout_s");
  }
}

absl::StatusOr<std::optional<StepVoteResponse>> CoordinatorCore::CastStepVote(
    const StepVoteRequest& req) {
  absl::MutexLock lock(&mu_);
  if (feed_.shut_down()) return absl::UnavailableError("coordinator is shutting down");
  ASSIGN_OR_RETURN(JobRecord * job, jobs_.Find(req.job_id()));
  RETURN_IF_ERROR(CheckReportSource(job->status(), req.attempt(), req.rank()));
  auto it = quorums_.find(req.job_id());
  if (it == quorums_.end()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", req.job_id(), " does not use fault_tolerance.mode REPLICA_GROUPS: no StepVote"));
  }
  ASSIGN_OR_RETURN(ReplicaQuorum::VoteResult result, it->second.Vote(req, clock_->Now()));
  ApplyQuorumActionsLocked(*job, std::move(result.actions), "RANK_FAILED",
                           absl::StrCat("rank ", req.rank(), " voted not ok on ",
                                        StepVoteName(req.step(), req.phase()), ": ", req.error()));
  if (result.answer) return result.answer;
  return StepVoteAnswerLocked(req);
}

std::optional<StepVoteResponse> CoordinatorCore::StepVoteAnswer(const StepVoteRequest& req) {
  absl::MutexLock lock(&mu_);
  return StepVoteAnswerLocked(req);
}

std::optional<StepVoteResponse> CoordinatorCore::StepVoteAnswerLocked(const StepVoteRequest& req) {
  auto job = jobs_.Find(req.job_id());
  auto it = quorums_.find(req.job_id());
  if (!job.ok() || it == quorums_.end() || (*job)->status().attempt() != req.attempt()) {
    StepVoteResponse leave;  // the attempt ended while the vote waited
    leave.set_decision(StepVoteResponse::LEAVE);
    leave.set_step(req.step());
    return leave;
  }
  return it->second.Answer(req);
}

absl::Status CoordinatorCore::NoDecisionYet(const StepVoteRequest& req) {
  return absl::DeadlineExceededError(
      req.joining() ? absl::StrCat("no decision yet on the join of rank ", req.rank(),
                                   " generation ", req.generation(), "; send it again")
                    : absl::StrCat("no decision yet for ", StepVoteName(req.step(), req.phase()),
                                   " (membership epoch ", req.epoch(), "); send the vote again"));
}

}  // namespace shardline::coordinator
