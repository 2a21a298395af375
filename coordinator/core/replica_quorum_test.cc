#include "coordinator/core/replica_quorum.h"

#include <gtest/gtest.h>

#include <vector>

#include "absl/time/time.h"

namespace shardline::coordinator {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);

StepVoteRequest V(int32_t rank, int64_t step, int64_t epoch, bool ok = true, double loss = 1.0) {
  StepVoteRequest r;
  r.set_rank(rank);
  r.set_step(step);
  r.set_epoch(epoch);
  r.set_ok(ok);
  r.set_loss(loss);
  return r;
}

// A TRAIN vote that announces an AFTER_STEP vote, and that AFTER_STEP vote.
StepVoteRequest TrainThenAfter(int32_t rank, int64_t step, int64_t epoch) {
  StepVoteRequest r = V(rank, step, epoch);
  r.set_after_step_follows(true);
  return r;
}

StepVoteRequest After(int32_t rank, int64_t step, int64_t epoch, bool ok = true) {
  StepVoteRequest r = V(rank, step, epoch, ok, 0);
  r.set_phase(StepVoteRequest::AFTER_STEP);
  return r;
}

StepVoteRequest Join(int32_t rank, int32_t generation) {
  StepVoteRequest r;
  r.set_rank(rank);
  r.set_generation(generation);
  r.set_joining(true);
  return r;
}

// Rank 1 fails between steps (epoch 1 without group 0); group 0's replacement (generation 1)
// is placed and both its ranks ask to join.
void GroupZeroLostAndItsReplacementJoining(ReplicaQuorum& q) {
  q.RankFailed(1, 0, "exit 1", kT0);
  EXPECT_EQ(q.ReplacementPlaced(0), 1);
  EXPECT_FALSE(q.Vote(Join(0, 1), kT0)->answer);
  EXPECT_FALSE(q.Vote(Join(1, 1), kT0)->answer);
}

// W = 6, S = 2: groups 0 (ranks 0-1), 1 (2-3), 2 (4-5).
fsdp::ParallelLayout SixRanksOfTwo() { return fsdp::ParallelLayout::ForShape(6, 2).value(); }

ReplicaQuorum Quorum(int32_t min_replicas = 1) {
  return ReplicaQuorum(SixRanksOfTwo(), min_replicas, absl::Seconds(10));
}

std::vector<int32_t> Live(const StepVoteResponse& r) {
  return {r.live_groups().begin(), r.live_groups().end()};
}

TEST(ReplicaQuorum, CommitsWhenEveryMemberVotedOkWithTheMeanLoss) {
  ReplicaQuorum q = Quorum();
  for (int32_t rank = 0; rank < 5; ++rank) {
    auto res = q.Vote(V(rank, 1, 0, true, rank), kT0);
    ASSERT_TRUE(res.ok()) << res.status();
    EXPECT_FALSE(res->answer) << rank;
  }
  // A repeated vote changes nothing.
  ASSERT_FALSE(q.Vote(V(0, 1, 0, true, 100), kT0)->answer);
  auto last = q.Vote(V(5, 1, 0, true, 5), kT0);
  ASSERT_TRUE(last.ok());
  ASSERT_TRUE(last->answer);
  EXPECT_TRUE(last->actions.decided);
  EXPECT_EQ(last->answer->decision(), StepVoteResponse::COMMIT);
  EXPECT_EQ(last->answer->step(), 1);
  EXPECT_DOUBLE_EQ(last->answer->loss(), 2.5);
  EXPECT_EQ(last->answer->epoch(), 0);
  EXPECT_EQ(Live(*last->answer), (std::vector<int32_t>{0, 1, 2}));
  // Answered again to a retried voter.
  auto again = q.Answer(V(0, 1, 0));
  ASSERT_TRUE(again);
  EXPECT_EQ(again->decision(), StepVoteResponse::COMMIT);
  EXPECT_DOUBLE_EQ(again->loss(), 2.5);
}

TEST(ReplicaQuorum, LostRankAbortsTheStepIntoANewEpochWithoutItsGroup) {
  ReplicaQuorum q = Quorum();
  ASSERT_TRUE(q.Vote(V(0, 3, 0), kT0).ok());
  ASSERT_TRUE(q.Vote(V(1, 3, 0, false), kT0).ok());
  QuorumActions a = q.RankFailed(3, 0, "rank 3 was killed by signal 9", kT0);
  ASSERT_EQ(a.lost.size(), 1u);
  EXPECT_EQ(a.lost[0].group, 1);
  EXPECT_EQ(a.lost[0].step, 3);
  EXPECT_EQ(a.lost[0].live_after, 2);
  EXPECT_EQ(a.stop_ranks, (std::vector<int32_t>{2, 3}));
  EXPECT_FALSE(a.decided);  // ranks 4 and 5 have not voted yet
  // The lost group's survivor leaves.
  EXPECT_EQ(q.Vote(V(2, 3, 0, false), kT0)->answer->decision(), StepVoteResponse::LEAVE);
  ASSERT_TRUE(q.Vote(V(4, 3, 0, false), kT0).ok());
  auto last = q.Vote(V(5, 3, 0, false), kT0);
  ASSERT_TRUE(last->answer);
  EXPECT_EQ(last->answer->decision(), StepVoteResponse::ABORT);
  EXPECT_EQ(last->answer->epoch(), 1);
  EXPECT_EQ(Live(*last->answer), (std::vector<int32_t>{0, 2}));
  EXPECT_EQ(q.Answer(V(0, 3, 0))->decision(), StepVoteResponse::ABORT);
  EXPECT_EQ(q.GroupsToReplace(), (std::vector<int32_t>{1}));
  // The old generation's exit of the other rank is expected.
  EXPECT_TRUE(q.RankFailed(2, 0, "exit 7", kT0).lost.empty());
  // The step is trained again under epoch 1 and commits over groups 0 and 2.
  for (int32_t rank : {0, 1, 4}) EXPECT_FALSE(q.Vote(V(rank, 3, 1), kT0)->answer);
  auto commit = q.Vote(V(5, 3, 1), kT0);
  EXPECT_EQ(commit->answer->decision(), StepVoteResponse::COMMIT);
  EXPECT_EQ(commit->answer->epoch(), 1);
}

TEST(ReplicaQuorum, JoinersAreAdmittedAtTheNextCommitAndHealedFromTheLowestLiveGroup) {
  ReplicaQuorum q = Quorum();
  q.RankFailed(1, 0, "exit 1", kT0);  // between steps: epoch 1 at once
  EXPECT_EQ(q.epoch(), 1);
  EXPECT_EQ(q.live_groups(), (std::vector<int32_t>{1, 2}));
  // A stale-epoch vote is told to train again under epoch 1.
  auto stale = q.Vote(V(2, 5, 0), kT0);
  EXPECT_EQ(stale->answer->decision(), StepVoteResponse::ABORT);
  EXPECT_EQ(stale->answer->epoch(), 1);
  EXPECT_EQ(q.ReplacementPlaced(0), 1);
  EXPECT_EQ(q.UnadmittedRanks(), (std::vector<int32_t>{0, 1}));
  // The old generation leaves; a generation never placed is refused.
  EXPECT_EQ(q.Vote(V(0, 5, 0), kT0)->answer->decision(), StepVoteResponse::LEAVE);
  EXPECT_EQ(q.Vote(Join(0, 2), kT0).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(q.Vote(Join(0, 1), kT0)->answer);
  EXPECT_FALSE(q.Vote(Join(1, 1), kT0)->answer);
  for (int32_t rank : {2, 3, 4}) EXPECT_FALSE(q.Vote(V(rank, 5, 1), kT0)->answer);
  auto commit = q.Vote(V(5, 5, 1), kT0);
  ASSERT_TRUE(commit->actions.healed);
  EXPECT_EQ(commit->actions.healed->groups, (std::vector<int32_t>{0}));
  EXPECT_EQ(commit->actions.healed->source, 1);
  const StepVoteResponse& r = *commit->answer;
  EXPECT_EQ(r.decision(), StepVoteResponse::COMMIT);
  EXPECT_EQ(r.epoch(), 2);
  EXPECT_EQ(Live(r), (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(std::vector<int32_t>(r.joining_groups().begin(), r.joining_groups().end()),
            (std::vector<int32_t>{0}));
  EXPECT_EQ(r.heal_source_group(), 1);
  auto joiner = q.Answer(Join(0, 1));
  ASSERT_TRUE(joiner);
  EXPECT_EQ(joiner->epoch(), 2);
  EXPECT_TRUE(q.UnadmittedRanks().empty());
}

TEST(ReplicaQuorum, AStalledRankIsLostAfterTheVoteTimeout) {
  ReplicaQuorum q = Quorum();
  ASSERT_TRUE(q.Vote(V(0, 2, 0, false), kT0).ok());
  for (int32_t rank : {1, 2, 3, 4}) ASSERT_TRUE(q.Vote(V(rank, 2, 0, false), kT0).ok());
  EXPECT_FALSE(q.Tick(kT0 + absl::Seconds(9)).decided);
  QuorumActions a = q.Tick(kT0 + absl::Seconds(10));
  ASSERT_EQ(a.lost.size(), 1u);
  EXPECT_EQ(a.lost[0].group, 2);
  EXPECT_NE(a.lost[0].cause.find("rank 5 did not vote on step 2"), std::string::npos)
      << a.lost[0].cause;
  EXPECT_EQ(a.stop_ranks, (std::vector<int32_t>{4, 5}));
  EXPECT_TRUE(a.decided);
  EXPECT_EQ(q.Answer(V(0, 2, 0))->decision(), StepVoteResponse::ABORT);
  EXPECT_EQ(q.Answer(V(4, 2, 0))->decision(), StepVoteResponse::LEAVE);
  EXPECT_EQ(q.live_groups(), (std::vector<int32_t>{0, 1}));
}

TEST(ReplicaQuorum, ARankStalledAfterItsCollectivesIsLostAfterTheStallTimeout) {
  // Every voter so far voted ok (the stalled rank finished the step's collectives first): no
  // failure starts vote_timeout, so the stall bound after the first vote decides.
  ReplicaQuorum q(SixRanksOfTwo(), 1, absl::Seconds(10), absl::Seconds(40));
  for (int32_t rank : {0, 1, 2, 4, 5}) ASSERT_FALSE(q.Vote(V(rank, 7, 0), kT0)->answer);
  EXPECT_FALSE(q.Tick(kT0 + absl::Seconds(39)).decided);
  QuorumActions a = q.Tick(kT0 + absl::Seconds(40));
  ASSERT_TRUE(a.decided);
  ASSERT_EQ(a.lost.size(), 1u);
  EXPECT_EQ(a.lost[0].group, 1);
  EXPECT_EQ(a.lost[0].cause,
            "rank 3 did not vote on step 7 within 40s of the step's first vote "
            "(fsdp.collective_timeout_s + fault_tolerance.vote_timeout_s; stalled)");
  EXPECT_EQ(a.stop_ranks, (std::vector<int32_t>{2, 3}));
  auto r = q.Answer(V(0, 7, 0));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->decision(), StepVoteResponse::ABORT);
  EXPECT_EQ(Live(*r), (std::vector<int32_t>{0, 2}));
  // Without a stall bound (0) the same votes wait.
  ReplicaQuorum unbounded = Quorum();
  for (int32_t rank : {0, 1, 2, 4, 5}) ASSERT_TRUE(unbounded.Vote(V(rank, 7, 0), kT0).ok());
  EXPECT_FALSE(unbounded.Tick(kT0 + absl::Hours(1)).decided);
}

TEST(ReplicaQuorum, FewerThanMinReplicasFailsTheAttempt) {
  ReplicaQuorum q = Quorum(/*min_replicas=*/2);
  EXPECT_TRUE(q.RankFailed(0, 0, "exit 1", kT0).attempt_failure.empty());
  QuorumActions a = q.RankFailed(2, 0, "exit 1", kT0);
  EXPECT_EQ(a.attempt_failure,
            "only 1 of 3 replica groups left, fewer than fault_tolerance.min_replicas 2");
  EXPECT_TRUE(q.failed());
  EXPECT_EQ(q.Answer(V(4, 1, 2))->decision(), StepVoteResponse::LEAVE);
}

TEST(ReplicaQuorum, DigestMismatchOfOneShardIsDivergence) {
  ReplicaQuorum q = Quorum();
  for (int32_t rank = 0; rank < 6; ++rank) {
    StepVoteRequest v = V(rank, 4, 0);
    v.set_has_digest(true);
    v.set_digest(rank == 3 ? 0xbad : 0x100 + SixRanksOfTwo().ShardIndex(rank));
    auto res = q.Vote(v, kT0);
    ASSERT_TRUE(res.ok());
    if (rank == 5) {
      EXPECT_NE(res->actions.diverged.find("replica groups diverged at step 4: shard 1"),
                std::string::npos)
          << res->actions.diverged;
      EXPECT_EQ(res->answer->decision(), StepVoteResponse::LEAVE);
    }
  }
}

TEST(ReplicaQuorum, AVoteForAnotherStepThanTheOpenOneIsRefused) {
  ReplicaQuorum q = Quorum();
  ASSERT_TRUE(q.Vote(V(0, 2, 0), kT0).ok());
  auto other = q.Vote(V(1, 3, 0), kT0);
  EXPECT_EQ(other.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(q.Vote(V(9, 2, 0), kT0).status().code(), absl::StatusCode::kInvalidArgument);
  StepVoteRequest odd = V(1, 2, 0);
  odd.set_phase(static_cast<StepVoteRequest::Phase>(7));
  EXPECT_EQ(q.Vote(odd, kT0).status(),
            absl::InvalidArgumentError("phase: 7 is not TRAIN or AFTER_STEP"));
}

TEST(ReplicaQuorum, AFailureAfterTheUpdateAbortsOnlyTheAfterStepWorkIntoANewEpoch) {
  ReplicaQuorum q = Quorum();
  for (int32_t rank = 0; rank < 6; ++rank)
    ASSERT_TRUE(q.Vote(TrainThenAfter(rank, 4, 0), kT0).ok());
  const StepVoteResponse train = *q.Answer(V(0, 4, 0));
  EXPECT_EQ(train.decision(), StepVoteResponse::COMMIT);
  EXPECT_EQ(train.phase(), StepVoteRequest::TRAIN);
  // The save after step 4 fails on group 2's ranks (a peer reset its connection), and group 1
  // loses a rank before it votes: the work after step 4 is done again by groups 0 and 2.
  ASSERT_TRUE(q.Vote(After(0, 4, 0), kT0).ok());
  ASSERT_TRUE(q.Vote(After(4, 4, 0, false), kT0).ok());
  q.RankFailed(3, 0, "rank 3 was killed by signal 9", kT0);
  ASSERT_TRUE(q.Vote(After(1, 4, 0), kT0).ok());
  auto last = q.Vote(After(5, 4, 0, false), kT0);
  ASSERT_TRUE(last.ok()) << last.status();
  ASSERT_TRUE(last->answer);
  EXPECT_EQ(last->answer->decision(), StepVoteResponse::ABORT);
  EXPECT_EQ(last->answer->phase(), StepVoteRequest::AFTER_STEP);
  EXPECT_EQ(last->answer->step(), 4);
  EXPECT_EQ(last->answer->epoch(), 1);
  EXPECT_EQ(Live(*last->answer), (std::vector<int32_t>{0, 2}));
  // The TRAIN decision of step 4 stays answered as it was; a TRAIN vote on step 5 while the
  // work after step 4 is open in epoch 1 is refused, naming both.
  EXPECT_EQ(q.Answer(V(4, 4, 0))->decision(), StepVoteResponse::COMMIT);
  EXPECT_EQ(q.Answer(V(2, 4, 0))->decision(), StepVoteResponse::LEAVE);  // group 1 is lost
  ASSERT_TRUE(q.Vote(After(0, 4, 1), kT0).ok());
  auto early = q.Vote(V(1, 5, 1), kT0);
  EXPECT_EQ(early.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(
      early.status().message().find("voted on step 5 while the work after step 4 is being decided"),
      std::string::npos)
      << early.status();
  for (int32_t rank : {1, 4}) ASSERT_TRUE(q.Vote(After(rank, 4, 1), kT0).ok());
  auto done = q.Vote(After(5, 4, 1), kT0);
  ASSERT_TRUE(done->answer);
  EXPECT_EQ(done->answer->decision(), StepVoteResponse::COMMIT);
  EXPECT_EQ(done->answer->epoch(), 1);
  // Step 5 opens next.
  EXPECT_FALSE(q.Vote(V(0, 5, 1), kT0)->answer);
}

TEST(ReplicaQuorum, JoinersWaitForTheAfterStepCommitWhenOneFollows) {
  ReplicaQuorum q = Quorum();
  GroupZeroLostAndItsReplacementJoining(q);
  for (int32_t rank : {2, 3, 4}) EXPECT_FALSE(q.Vote(TrainThenAfter(rank, 6, 1), kT0)->answer);
  auto train = q.Vote(TrainThenAfter(5, 6, 1), kT0);
  ASSERT_TRUE(train->answer);
  EXPECT_EQ(train->answer->decision(), StepVoteResponse::COMMIT);
  EXPECT_FALSE(train->actions.healed);  // not admitted: the evaluation or save comes first
  EXPECT_EQ(train->answer->joining_groups_size(), 0);
  EXPECT_EQ(train->answer->epoch(), 1);
  EXPECT_FALSE(q.Answer(Join(0, 1)));
  for (int32_t rank : {2, 3, 4}) EXPECT_FALSE(q.Vote(After(rank, 6, 1), kT0)->answer);
  auto after = q.Vote(After(5, 6, 1), kT0);
  ASSERT_TRUE(after->actions.healed);
  EXPECT_EQ(after->actions.healed->groups, (std::vector<int32_t>{0}));
  EXPECT_EQ(after->actions.healed->step, 6);
  EXPECT_EQ(after->answer->epoch(), 2);
  EXPECT_EQ(after->answer->phase(), StepVoteRequest::AFTER_STEP);
  ASSERT_TRUE(q.Answer(Join(0, 1)));
  EXPECT_EQ(q.Answer(Join(0, 1))->epoch(), 2);
}

TEST(ReplicaQuorum, NoJoinerIsAdmittedAtTheJobsLastStep) {
  ReplicaQuorum q(SixRanksOfTwo(), 1, absl::Seconds(10), absl::ZeroDuration(), /*last_step=*/8);
  GroupZeroLostAndItsReplacementJoining(q);
  for (int32_t rank : {2, 3, 4}) EXPECT_FALSE(q.Vote(V(rank, 8, 1), kT0)->answer);
  auto last = q.Vote(V(5, 8, 1), kT0);
  ASSERT_TRUE(last->answer);
  EXPECT_EQ(last->answer->decision(), StepVoteResponse::COMMIT);
  EXPECT_FALSE(last->actions.healed);
  EXPECT_EQ(last->answer->joining_groups_size(), 0);
  EXPECT_EQ(q.UnadmittedRanks(), (std::vector<int32_t>{0, 1}));  // stopped with the job
}

TEST(ReplicaQuorum, AFailedReplacementIsPlacedAgain) {
  ReplicaQuorum q = Quorum();
  q.RankFailed(2, 0, "exit 1", kT0);
  EXPECT_EQ(q.ReplacementPlaced(1), 1);
  EXPECT_TRUE(q.GroupsToReplace().empty());
  QuorumActions a = q.RankFailed(3, 1, "start timeout", kT0);
  ASSERT_EQ(a.lost.size(), 1u);
  EXPECT_EQ(q.GroupsToReplace(), (std::vector<int32_t>{1}));
  EXPECT_EQ(q.ReplacementPlaced(1), 2);
  EXPECT_EQ(q.Answer(Join(2, 1))->decision(), StepVoteResponse::LEAVE);
}

}  // namespace
}  // namespace shardline::coordinator
