// CoordinatorCore with fault_tolerance REPLICA_GROUPS: votes, lost replica groups, STOP_RANK,
// replacement groups, healing, min_replicas fallback, stalls and divergence, driven by
// heartbeats, votes and a fake clock.
#include <gtest/gtest.h>

#include <unistd.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/testing/fake_clock.h"
#include "coordinator/core/coordinator_core.h"
#include "coordinator/testing/test_jobs.h"

namespace shardline::coordinator {
namespace {

JobSpec FtSpec(int w, int s, int min_replicas = 1, int max_restarts = 0) {
  JobSpec spec;
  spec.set_name("ft");
  spec.set_world_size(w);
  spec.mutable_fsdp()->set_sharding_strategy(FsdpSpec::HYBRID_SHARD);
  spec.mutable_fsdp()->set_hybrid_shard_degree(s);
  spec.mutable_restart()->set_max_restarts(max_restarts);
  spec.mutable_train()->set_steps(100);
  spec.mutable_fault_tolerance()->set_mode(FaultToleranceSpec::REPLICA_GROUPS);
  spec.mutable_fault_tolerance()->set_min_replicas(min_replicas);
  spec.mutable_fault_tolerance()->set_vote_timeout_s(10);
  return spec;
}

bool HasEvent(const JobStatus& st, const std::string& kind, const std::string& text = "") {
  for (const JobEvent& e : st.events()) {
    if (e.kind() == kind && e.message().find(text) != std::string::npos) return true;
  }
  return false;
}

std::string Events(const JobStatus& st) {
  std::string out;
  for (const JobEvent& e : st.events()) absl::StrAppend(&out, e.kind(), ": ", e.message(), "\n");
  return out;
}

class FtCoreTest : public ::testing::Test {
 protected:
  void SetUp() override { Make(""); }
  // A core on `state_dir` (empty: in memory); a second call restarts the coordinator.
  void Make(const std::string& state_dir) {
    core_.reset();
    CoreOptions o;
    o.clock = &clock_;
    o.state_dir = state_dir;
    o.state_retry_interval = absl::Milliseconds(20);
    o.heartbeat_interval = absl::Seconds(1);
    o.heartbeat_timeout = absl::Seconds(5);
    o.rank_start_timeout = absl::Seconds(30);
    auto core = CoordinatorCore::Create(o);
    ASSERT_TRUE(core.ok()) << core.status();
    core_ = std::move(*core);
  }

  // `workers` workers of `slots` slots each, every one with an open stream.
  void AddWorkers(int workers, int slots) {
    for (int i = 0; i < workers; ++i) {
      auto r = core_->RegisterWorker(TestWorkerRequest(absl::StrCat("node-", nodes_++), slots));
      ASSERT_TRUE(r.ok()) << r.status();
      auto gen = core_->OpenAssignmentStream(r->worker_id());
      ASSERT_TRUE(gen.ok());
      streams_[r->worker_id()] = *gen;
    }
  }

  std::vector<Assignment> Drain(const std::string& worker) {
    std::vector<Assignment> out;
    Assignment a;
    while (true) {
      auto got = core_->NextAssignment(worker, streams_[worker], absl::ZeroDuration(), &a);
      if (!got.ok() || !*got) break;
      out.push_back(a);
    }
    return out;
  }

  JobStatus Job() {
    auto st = core_->GetJob(job_);
    EXPECT_TRUE(st.ok());
    return *st;
  }

  std::string WorkerOf(int rank) { return Job().placement(rank).worker_id(); }

  // Submits the job and acknowledges every rank (RUNNING) from its worker.
  void SubmitAndRun(const JobSpec& spec) {
    auto id = core_->SubmitJob(spec);
    ASSERT_TRUE(id.ok()) << id.status();
    job_ = *id;
    ASSERT_EQ(Job().state(), RUNNING) << Job().message();
    for (auto& [w, gen] : streams_) Drain(w);
    for (int rank = 0; rank < spec.world_size(); ++rank) Status(rank, RankStatus::RUNNING);
  }

  void Status(int rank, RankStatus::State state, int exit_code = 0, int generation = 0) {
    HeartbeatRequest hb;
    hb.set_worker_id(WorkerOf(rank));
    RankStatus* rs = hb.add_ranks();
    rs->set_job_id(job_);
    rs->set_attempt(Job().attempt());
    rs->set_rank(rank);
    rs->set_state(state);
    rs->set_exit_code(exit_code);
    rs->set_generation(generation);
    // The worker's other running ranks of the job, so none reads as lost.
    const JobStatus now = Job();
    for (const RankPlacement& p : now.placement()) {
      if (p.worker_id() != hb.worker_id() || p.rank() == rank || exited_.count(p.rank())) continue;
      RankStatus* other = hb.add_ranks();
      other->set_job_id(job_);
      other->set_attempt(Job().attempt());
      other->set_rank(p.rank());
      other->set_state(RankStatus::RUNNING);
      other->set_generation(p.generation());
    }
    if (state == RankStatus::EXITED) exited_.insert(rank);
    ASSERT_TRUE(core_->Heartbeat(hb).ok());
  }

  // The StepVote RPC without its wait: the decision when there is one, else the "no decision
  // yet" DEADLINE_EXCEEDED a vote whose wait ran out answers.
  absl::StatusOr<StepVoteResponse> Cast(const StepVoteRequest& v) {
    absl::StatusOr<std::optional<StepVoteResponse>> r = core_->CastStepVote(v);
    if (!r.ok()) return r.status();
    if (!r->has_value()) return CoordinatorCore::NoDecisionYet(v);
    return **r;
  }

  absl::StatusOr<StepVoteResponse> Vote(int rank, int64_t step, int64_t epoch, bool ok = true,
                                        double loss = 1.0, int generation = 0) {
    StepVoteRequest v;
    v.set_job_id(job_);
    v.set_attempt(Job().attempt());
    v.set_rank(rank);
    v.set_generation(generation);
    v.set_epoch(epoch);
    v.set_step(step);
    v.set_ok(ok);
    v.set_loss(loss);
    if (!ok) v.set_error("gloo: connection closed by peer");
    return Cast(v);
  }

  absl::StatusOr<StepVoteResponse> Join(int rank, int generation) {
    StepVoteRequest v;
    v.set_job_id(job_);
    v.set_attempt(Job().attempt());
    v.set_rank(rank);
    v.set_generation(generation);
    v.set_joining(true);
    return Cast(v);
  }

  // Every rank in `ranks` votes; all but the last must get "no decision yet"; returns the last
  // one's answer.
  StepVoteResponse VoteAll(const std::vector<int>& ranks, int64_t step, int64_t epoch,
                           bool ok = true) {
    for (size_t i = 0; i + 1 < ranks.size(); ++i) {
      auto r = Vote(ranks[i], step, epoch, ok, ranks[i]);
      EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded) << ranks[i];
      EXPECT_NE(r.status().message().find(absl::StrCat("no decision yet for step ", step)),
                std::string::npos)
          << r.status();
    }
    auto last = Vote(ranks.back(), step, epoch, ok, ranks.back());
    EXPECT_TRUE(last.ok()) << last.status();
    return last.ok() ? *last : StepVoteResponse();
  }

  FakeClock clock_;
  std::unique_ptr<CoordinatorCore> core_;
  std::map<std::string, int64_t> streams_;
  std::string job_;
  std::set<int> exited_;
  int nodes_ = 0;
};

std::vector<int32_t> LiveOf(const JobStatus& st) {
  return {st.live_replica_groups().begin(), st.live_replica_groups().end()};
}

std::vector<int32_t> Live(const StepVoteResponse& r) {
  return {r.live_groups().begin(), r.live_groups().end()};
}

TEST_F(FtCoreTest, LostGroupIsReplacedHealedAndTheJobSucceedsWithoutARestart) {
  AddWorkers(3, 2);
  SubmitAndRun(FtSpec(6, 2));
  EXPECT_EQ(LiveOf(Job()), (std::vector<int32_t>{0, 1, 2}));

  // Step 1: every rank votes ok; the decision is the mean loss, answered again on a re-send.
  StepVoteResponse c1 = VoteAll({0, 1, 2, 3, 4, 5}, 1, 0);
  EXPECT_EQ(c1.decision(), StepVoteResponse::COMMIT);
  EXPECT_DOUBLE_EQ(c1.loss(), 2.5);
  EXPECT_EQ(Live(c1), (std::vector<int32_t>{0, 1, 2}));
  auto again = Vote(0, 1, 0);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->decision(), StepVoteResponse::COMMIT);

  // Step 2: rank 2 is SIGKILLed mid-step; its peers' collectives fail.
  EXPECT_EQ(Vote(0, 2, 0).status().code(), absl::StatusCode::kDeadlineExceeded);
  const std::string w2 = WorkerOf(2);
  const std::string w3 = WorkerOf(3);
  Status(2, RankStatus::EXITED, -9);
  JobStatus st = Job();
  EXPECT_EQ(st.state(), RUNNING);
  EXPECT_TRUE(HasEvent(st, "REPLICA_GROUP_LOST",
                       "replica group 1 (ranks 2-3) lost at step 2: rank 2 on node"))
      << Events(st);
  EXPECT_TRUE(HasEvent(st, "REPLICA_GROUP_LOST", "training on with 2 of 3 replica groups"));
  EXPECT_FALSE(HasEvent(st, "RANK_FAILED")) << Events(st);
  bool stop3 = false;
  for (const Assignment& a : Drain(w3)) {
    stop3 |= a.action() == Assignment::STOP_RANK && a.rank() == 3 && a.generation() == 0;
  }
  EXPECT_TRUE(stop3);
  // The lost group's survivor leaves; the others abort into epoch 1 without group 1.
  auto leave = Vote(3, 2, 0, false);
  ASSERT_TRUE(leave.ok());
  EXPECT_EQ(leave->decision(), StepVoteResponse::LEAVE);
  StepVoteResponse a2 = VoteAll({1, 4, 5}, 2, 0, false);
  EXPECT_EQ(a2.decision(), StepVoteResponse::ABORT);
  EXPECT_EQ(a2.epoch(), 1);
  EXPECT_EQ(Live(a2), (std::vector<int32_t>{0, 2}));
  EXPECT_EQ(Vote(0, 2, 0)->decision(), StepVoteResponse::ABORT);
  EXPECT_EQ(Job().membership_epoch(), 1);
  EXPECT_EQ(LiveOf(Job()), (std::vector<int32_t>{0, 2}));

  // Rank 3 exits at the STOP_RANK (expected, whatever its code); its slot frees and the
  // replacement group starts as generation 1 on the failed node's worker.
  Status(3, RankStatus::EXITED, 7);
  EXPECT_EQ(Job().state(), RUNNING);
  std::vector<Assignment> starts = Drain(w2);
  if (w3 != w2) {
    for (const Assignment& a : Drain(w3)) starts.push_back(a);
  }
  std::set<int> restarted;
  for (const Assignment& a : starts) {
    if (a.action() == Assignment::START) {
      EXPECT_EQ(a.generation(), 1);
      restarted.insert(a.rank());
    }
  }
  EXPECT_EQ(restarted, (std::set<int>{2, 3}));
  EXPECT_EQ(Job().placement(2).generation(), 1);
  EXPECT_EQ(Job().placement(2).worker_id(), w2);
  EXPECT_TRUE(HasEvent(Job(), "REPLICA_GROUP_PLACED", "generation 1"));
  exited_.erase(2);
  exited_.erase(3);
  Status(2, RankStatus::RUNNING, 0, 1);
  Status(3, RankStatus::RUNNING, 0, 1);
  {
    // A late exit of the old generation, next to the new one running, changes nothing.
    HeartbeatRequest hb;
    hb.set_worker_id(w2);
    for (int gen : {0, 1}) {
      RankStatus* rs = hb.add_ranks();
      rs->set_job_id(job_);
      rs->set_attempt(1);
      rs->set_rank(2);
      rs->set_generation(gen);
      rs->set_state(gen == 0 ? RankStatus::EXITED : RankStatus::RUNNING);
      rs->set_exit_code(gen == 0 ? -9 : 0);
    }
    const JobStatus now = Job();
    for (const RankPlacement& p : now.placement()) {
      if (p.worker_id() != w2 || p.rank() == 2) continue;
      RankStatus* rs = hb.add_ranks();
      rs->set_job_id(job_);
      rs->set_attempt(1);
      rs->set_rank(p.rank());
      rs->set_generation(p.generation());
      rs->set_state(RankStatus::RUNNING);
    }
    ASSERT_TRUE(core_->Heartbeat(hb).ok());
  }
  EXPECT_EQ(Job().state(), RUNNING);
  EXPECT_EQ(Job().membership_epoch(), 1) << Events(Job());

  // The replacement joins; the next commit (step 2 again, under epoch 1) admits it.
  EXPECT_EQ(Join(2, 1).status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(Join(3, 1).status().code(), absl::StatusCode::kDeadlineExceeded);
  StepVoteResponse c2 = VoteAll({0, 1, 4, 5}, 2, 1);
  EXPECT_EQ(c2.decision(), StepVoteResponse::COMMIT);
  EXPECT_EQ(c2.epoch(), 2);
  EXPECT_EQ(Live(c2), (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(std::vector<int32_t>(c2.joining_groups().begin(), c2.joining_groups().end()),
            (std::vector<int32_t>{1}));
  EXPECT_EQ(c2.heal_source_group(), 0);
  auto joined = Join(2, 1);
  ASSERT_TRUE(joined.ok()) << joined.status();
  EXPECT_EQ(joined->decision(), StepVoteResponse::COMMIT);
  EXPECT_EQ(joined->epoch(), 2);
  EXPECT_TRUE(HasEvent(Job(), "REPLICA_GROUP_HEALED",
                       "replica group 1 (ranks 2-3) rejoined at step 2, healed from group 0"))
      << Events(Job());

  // Step 3 with everyone, then every rank of every live group exits 0.
  for (int rank = 0; rank < 5; ++rank) {
    EXPECT_EQ(Vote(rank, 3, 2, true, 1.0, (rank == 2 || rank == 3) ? 1 : 0).status().code(),
              absl::StatusCode::kDeadlineExceeded);
  }
  auto c3 = Vote(5, 3, 2);
  ASSERT_TRUE(c3.ok()) << c3.status();
  EXPECT_EQ(c3->decision(), StepVoteResponse::COMMIT);
  for (int rank = 0; rank < 6; ++rank) {
    Status(rank, RankStatus::EXITED, 0, (rank == 2 || rank == 3) ? 1 : 0);
  }
  st = Job();
  EXPECT_EQ(st.state(), SUCCEEDED) << Events(st);
  EXPECT_EQ(st.attempt(), 1);
  EXPECT_FALSE(HasEvent(st, "RESTARTING"));
}

// A whole worker dies: its group is lost at once (no vote waits for it) and the replacement
// goes to another worker with free slots.
TEST_F(FtCoreTest,
       AReplacementStillJoiningWhenTheJobSucceedsIsStoppedAndHoldsItsSlotsUntilItExits) {
  AddWorkers(2, 2);  // W = 4 fills both workers.
  SubmitAndRun(FtSpec(4, 2));
  const std::string wa = WorkerOf(0);
  const std::string wb = WorkerOf(2);
  ASSERT_NE(wa, wb);
  ASSERT_EQ(WorkerOf(3), wb);
  // Group 1 (worker B) is lost; its survivor exits at the STOP_RANK; the replacement starts on B.
  Status(2, RankStatus::EXITED, -9);
  Status(3, RankStatus::EXITED, 7);
  bool started = false;
  for (const Assignment& a : Drain(wb)) started |= a.action() == Assignment::START;
  ASSERT_TRUE(started) << Events(Job());
  exited_.erase(2);
  exited_.erase(3);
  Status(2, RankStatus::RUNNING, 0, 1);
  Status(3, RankStatus::RUNNING, 0, 1);
  // Group 0 finishes before the replacement was admitted: the job succeeds.
  Status(0, RankStatus::EXITED, 0);
  Status(1, RankStatus::EXITED, 0);
  ASSERT_EQ(Job().state(), SUCCEEDED) << Events(Job());
  bool stopped = false;
  for (const Assignment& a : Drain(wb)) stopped |= a.action() == Assignment::STOP;
  EXPECT_TRUE(stopped);
  // The replacement still runs on B's two slots: a job needing all four slots waits for it.
  const std::string first = job_;
  auto next = core_->SubmitJob(FtSpec(4, 2));
  ASSERT_TRUE(next.ok()) << next.status();
  core_->Tick();
  EXPECT_EQ(core_->GetJob(*next)->state(), PENDING);
  // Once B reports the replacement's ranks EXITED, its slots free and the next job runs.
  HeartbeatRequest hb;
  hb.set_worker_id(wb);
  for (int rank : {2, 3}) {
    RankStatus* rs = hb.add_ranks();
    rs->set_job_id(first);
    rs->set_attempt(1);
    rs->set_rank(rank);
    rs->set_generation(1);
    rs->set_state(RankStatus::EXITED);
    rs->set_exit_code(-15);
  }
  ASSERT_TRUE(core_->Heartbeat(hb).ok());
  HeartbeatRequest hb_a;
  hb_a.set_worker_id(wa);
  ASSERT_TRUE(core_->Heartbeat(hb_a).ok());
  core_->Tick();
  EXPECT_EQ(core_->GetJob(*next)->state(), RUNNING) << core_->GetJob(*next)->message();
}

TEST_F(FtCoreTest, LostWorkerLosesItsGroupAndTheReplacementGoesElsewhere) {
  AddWorkers(3, 2);
  SubmitAndRun(FtSpec(6, 2));
  const std::string dead = WorkerOf(4);
  ASSERT_EQ(WorkerOf(5), dead);
  std::set<std::string> before;
  for (const auto& [w, gen] : streams_) before.insert(w);
  AddWorkers(1, 2);  // a spare worker
  std::string spare;
  for (const auto& [w, gen] : streams_) {
    if (!before.count(w)) spare = w;
  }
  ASSERT_FALSE(spare.empty());
  // Steps 1: everyone votes; then the worker of group 2 stops heartbeating.
  EXPECT_EQ(VoteAll({0, 1, 2, 3, 4, 5}, 1, 0).decision(), StepVoteResponse::COMMIT);
  for (int i = 0; i < 6; ++i) {
    clock_.Advance(absl::Seconds(1));
    for (int rank : {0, 2}) Status(rank, RankStatus::RUNNING);
    HeartbeatRequest hb;
    hb.set_worker_id(spare);
    ASSERT_TRUE(core_->Heartbeat(hb).ok());
    core_->Tick();
  }
  JobStatus st = Job();
  EXPECT_EQ(st.state(), RUNNING) << Events(st);
  EXPECT_TRUE(HasEvent(st, "REPLICA_GROUP_LOST", "replica group 2 (ranks 4-5) lost at step 2"))
      << Events(st);
  EXPECT_EQ(LiveOf(st), (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(st.membership_epoch(), 1);
  EXPECT_EQ(st.placement(4).worker_id(), spare);
  EXPECT_EQ(st.placement(5).worker_id(), spare);
  EXPECT_EQ(st.placement(4).generation(), 1);
  EXPECT_EQ(st.placement(5).generation(), 1);
  // A vote of the old epoch on the next step is told to train it again under epoch 1.
  auto abort = Vote(0, 2, 0);
  ASSERT_TRUE(abort.ok()) << abort.status();
  EXPECT_EQ(abort->decision(), StepVoteResponse::ABORT);
  EXPECT_EQ(abort->epoch(), 1);
  EXPECT_EQ(Live(*abort), (std::vector<int32_t>{0, 1}));
}

// The membership is stored with the job: a restarted coordinator goes on with it.
TEST_F(FtCoreTest, MembershipSurvivesACoordinatorRestart) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/ft_state_", getpid());
  Make(dir);
  AddWorkers(3, 2);
  SubmitAndRun(FtSpec(6, 2));
  Status(2, RankStatus::EXITED, 1);
  EXPECT_EQ(Job().membership_epoch(), 1);
  nodes_ = 0;
  Make(dir);
  JobStatus st = Job();
  EXPECT_EQ(st.state(), RUNNING);
  EXPECT_EQ(st.membership_epoch(), 1);
  EXPECT_EQ(LiveOf(st), (std::vector<int32_t>{0, 2}));
  EXPECT_EQ(Vote(0, 1, 1).status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(Vote(2, 1, 1)->decision(), StepVoteResponse::LEAVE);
}

TEST_F(FtCoreTest, FewerThanMinReplicasRestartsFromTheCheckpoint) {
  AddWorkers(2, 2);
  SubmitAndRun(FtSpec(4, 2, /*min_replicas=*/2, /*max_restarts=*/1));
  Status(1, RankStatus::EXITED, 1);
  JobStatus st = Job();
  EXPECT_TRUE(HasEvent(st, "RANK_FAILED", "fewer than fault_tolerance.min_replicas 2"))
      << Events(st);
  EXPECT_TRUE(HasEvent(st, "RESTARTING")) << Events(st);
  EXPECT_NE(st.state(), RUNNING);
}

TEST_F(FtCoreTest, AStalledRankIsLostAfterTheVoteTimeout) {
  AddWorkers(2, 2);
  SubmitAndRun(FtSpec(4, 2));
  for (int rank : {0, 1, 2}) {
    EXPECT_EQ(Vote(rank, 1, 0, false).status().code(), absl::StatusCode::kDeadlineExceeded);
  }
  // Every rank stays alive (heartbeats); rank 3 just never votes.
  auto pass = [&](int seconds) {
    for (int i = 0; i < seconds; ++i) {
      clock_.Advance(absl::Seconds(1));
      for (int rank : {0, 1, 2, 3}) Status(rank, RankStatus::RUNNING);
      core_->Tick();
    }
  };
  pass(9);
  EXPECT_EQ(Vote(0, 1, 0, false).status().code(), absl::StatusCode::kDeadlineExceeded);
  pass(1);
  JobStatus st = Job();
  EXPECT_EQ(st.state(), RUNNING);
  EXPECT_TRUE(HasEvent(st, "REPLICA_GROUP_LOST",
                       "replica group 1 (ranks 2-3) lost at step 1: rank 3 did not vote on step 1 "
                       "within fault_tolerance.vote_timeout_s 10s of the step's first failure"))
      << Events(st);
  auto abort = Vote(0, 1, 0, false);
  ASSERT_TRUE(abort.ok()) << abort.status();
  EXPECT_EQ(abort->decision(), StepVoteResponse::ABORT);
  EXPECT_EQ(Live(*abort), (std::vector<int32_t>{0}));
  bool stop3 = false;
  for (const Assignment& a : Drain(WorkerOf(3))) {
    stop3 |= a.action() == Assignment::STOP_RANK && a.rank() == 3;
  }
  EXPECT_TRUE(stop3);
}

TEST_F(FtCoreTest, AFailedVoteOnTheWorkAfterAStepAbortsOnlyThatWork) {
  AddWorkers(2, 2);
  SubmitAndRun(FtSpec(4, 2));
  auto vote = [&](int rank, int64_t epoch, StepVoteRequest::Phase phase, bool ok) {
    StepVoteRequest v;
    v.set_job_id(job_);
    v.set_attempt(Job().attempt());
    v.set_rank(rank);
    v.set_epoch(epoch);
    v.set_step(1);
    v.set_phase(phase);
    v.set_after_step_follows(phase == StepVoteRequest::TRAIN);
    v.set_ok(ok);
    v.set_loss(1.0);
    if (!ok) v.set_error("gloo: connection closed by peer");
    return Cast(v);
  };
  for (int rank : {0, 1, 2}) ASSERT_FALSE(vote(rank, 0, StepVoteRequest::TRAIN, true).ok());
  auto train = vote(3, 0, StepVoteRequest::TRAIN, true);
  ASSERT_TRUE(train.ok()) << train.status();
  EXPECT_EQ(train->decision(), StepVoteResponse::COMMIT);
  // The save after step 1 failed on rank 3 (a peer reset its connection): that work is aborted
  // into epoch 1 with both groups (nobody was lost), the update stays committed.
  auto waiting = vote(0, 0, StepVoteRequest::AFTER_STEP, true);
  EXPECT_EQ(waiting.status(),
            absl::DeadlineExceededError("no decision yet for the work after step 1 (membership "
                                        "epoch 0); send the vote again"));
  for (int rank : {1, 2}) ASSERT_FALSE(vote(rank, 0, StepVoteRequest::AFTER_STEP, true).ok());
  auto abort = vote(3, 0, StepVoteRequest::AFTER_STEP, false);
  ASSERT_TRUE(abort.ok()) << abort.status();
  EXPECT_EQ(abort->decision(), StepVoteResponse::ABORT);
  EXPECT_EQ(abort->phase(), StepVoteRequest::AFTER_STEP);
  EXPECT_EQ(abort->epoch(), 1);
  EXPECT_EQ(Live(*abort), (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(vote(0, 0, StepVoteRequest::TRAIN, true)->decision(), StepVoteResponse::COMMIT);
  for (int rank : {0, 1, 2}) ASSERT_FALSE(vote(rank, 1, StepVoteRequest::AFTER_STEP, true).ok());
  auto done = vote(3, 1, StepVoteRequest::AFTER_STEP, true);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->decision(), StepVoteResponse::COMMIT);
  EXPECT_EQ(Job().state(), RUNNING);
  EXPECT_EQ(VoteAll({0, 1, 2, 3}, 2, 1).decision(), StepVoteResponse::COMMIT);
}

TEST_F(FtCoreTest, DigestMismatchFailsTheJob) {
  AddWorkers(2, 2);
  SubmitAndRun(FtSpec(4, 2, 1, /*max_restarts=*/3));
  for (int rank = 0; rank < 4; ++rank) {
    StepVoteRequest v;
    v.set_job_id(job_);
    v.set_attempt(1);
    v.set_rank(rank);
    v.set_step(8);
    v.set_ok(true);
    v.set_has_digest(true);
    constexpr int kShardIndex[] = {0, 1, 0, 1};  // W = 4, S = 2
    v.set_digest(rank == 2 ? 0xdead : 0x1000 + kShardIndex[rank]);
    auto r = Cast(v);
    if (rank == 3) {
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(r->decision(), StepVoteResponse::LEAVE);
    }
  }
  JobStatus st = Job();
  EXPECT_EQ(st.state(), FAILED) << Events(st);
  EXPECT_TRUE(HasEvent(st, "REPLICAS_DIVERGED", "replica groups diverged at step 8: shard 0"))
      << Events(st);
}

TEST_F(FtCoreTest, StepVoteNeedsAReplicaGroupsJobAndItsRunningAttempt) {
  AddWorkers(2, 2);
  JobSpec plain = FtSpec(4, 2);
  plain.mutable_fault_tolerance()->set_mode(FaultToleranceSpec::NONE);
  SubmitAndRun(plain);
  auto r = Vote(0, 1, 0);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("does not use fault_tolerance.mode REPLICA_GROUPS"),
            std::string::npos)
      << r.status();
  StepVoteRequest v;
  v.set_job_id(job_);
  v.set_attempt(7);
  EXPECT_EQ(Cast(v).status().code(), absl::StatusCode::kFailedPrecondition);
}

// A vote without a decision waits; the vote that completes the step decides it for the waiting
// one too (the service answers it when the change feed reports the job's votes).
TEST_F(FtCoreTest, AVoteWaitsForTheDecision) {
  AddWorkers(1, 2);
  JobSpec spec = FtSpec(2, 1);
  spec.mutable_fsdp()->set_sharding_strategy(FsdpSpec::NO_SHARD);
  spec.mutable_fsdp()->set_hybrid_shard_degree(0);
  SubmitAndRun(spec);
  StepVoteRequest first;
  first.set_job_id(job_);
  first.set_attempt(1);
  first.set_rank(0);
  first.set_step(1);
  first.set_ok(true);
  first.set_loss(2);
  auto cast = core_->CastStepVote(first);
  ASSERT_TRUE(cast.ok()) << cast.status();
  EXPECT_FALSE(cast->has_value());
  EXPECT_FALSE(core_->StepVoteAnswer(first).has_value());
  auto second = Vote(1, 1, 0, true, 4);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->decision(), StepVoteResponse::COMMIT);
  std::optional<StepVoteResponse> answer = core_->StepVoteAnswer(first);
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(answer->decision(), StepVoteResponse::COMMIT);
  EXPECT_DOUBLE_EQ(answer->loss(), 3);
}

}  // namespace
}  // namespace shardline::coordinator
