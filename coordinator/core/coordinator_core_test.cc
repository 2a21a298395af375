#include "coordinator/core/coordinator_core.h"

#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/testing/fake_clock.h"
#include "coordinator/core/rank_tracker.h"
#include "coordinator/state/state_store.h"
#include "coordinator/testing/small_fs.h"
#include "fsdp/layout.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shardline::coordinator {
namespace {

JobSpec Spec(const std::string& name, int w, int max_restarts = 0) {
  JobSpec spec;
  spec.set_name(name);
  spec.set_world_size(w);
  spec.mutable_fsdp()->set_sharding_strategy(FsdpSpec::FULL_SHARD);
  spec.mutable_restart()->set_max_restarts(max_restarts);
  spec.mutable_train()->set_steps(100);
  spec.mutable_checkpoint()->set_keep_last(2);
  return spec;
}

RegisterWorkerRequest Worker(const std::string& node, int slots) {
  RegisterWorkerRequest r;
  r.set_node_name(node);
  r.set_address(node + ":0");
  for (int i = 0; i < slots; ++i) {
    Slot* s = r.add_slots();
    s->set_kind(Slot::CPU);
    s->set_index(i);
  }
  return r;
}

// A heartbeat of `worker` that lists one rank of (job, attempt) in `state`.
HeartbeatRequest RankBeat(const std::string& worker, const std::string& job, int attempt, int rank,
                          RankStatus::State state) {
  HeartbeatRequest hb;
  hb.set_worker_id(worker);
  RankStatus* rs = hb.add_ranks();
  rs->set_job_id(job);
  rs->set_attempt(attempt);
  rs->set_rank(rank);
  rs->set_state(state);
  return hb;
}

// A Set of `key` to `value` in the rendezvous namespace of START `a`, with its secret.
RendezvousSetRequest RendezvousSetFor(const Assignment& a, const std::string& key,
                                      const std::string& value) {
  RendezvousSetRequest req;
  req.set_namespace_(a.rendezvous_namespace());
  req.set_secret(a.rendezvous_secret());
  req.set_key(key);
  req.set_value(value);
  return req;
}

// The rendezvous rows stored under `dir` (no core may hold the store).
std::vector<RendezvousRow> StoredRendezvous(const std::string& dir) {
  auto store = StateStore::Open(dir);
  EXPECT_TRUE(store.ok()) << store.status();
  if (!store.ok()) return {};
  auto rows = (*store)->LoadRendezvous();
  EXPECT_TRUE(rows.ok()) << rows.status();
  return rows.ok() ? *std::move(rows) : std::vector<RendezvousRow>();
}

class CoreTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(""); }
  void Start(const std::string& state_dir,
             const std::function<void(CoreOptions&)>& tweak = nullptr) {
    core_.reset();
    CoreOptions o;
    o.clock = &clock_;
    o.state_dir = state_dir;
    o.heartbeat_interval = absl::Seconds(1);
    o.heartbeat_timeout = absl::Seconds(5);
    o.rank_start_timeout = absl::Seconds(30);
    o.state_retry_interval = absl::Milliseconds(20);
    if (tweak) tweak(o);
    auto core = CoordinatorCore::Create(o);
    ASSERT_TRUE(core.ok()) << core.status();
    core_ = std::move(*core);
  }
  std::string Register(const std::string& node, int slots) {
    auto r = core_->RegisterWorker(Worker(node, slots));
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->worker_id() : "";
  }
  std::vector<Assignment> Drain(const std::string& worker, int64_t gen) {
    std::vector<Assignment> out;
    Assignment a;
    while (true) {
      auto got = core_->NextAssignment(worker, gen, absl::ZeroDuration(), &a);
      EXPECT_TRUE(got.ok()) << got.status();
      if (!got.ok() || !*got) break;
      out.push_back(a);
    }
    return out;
  }
  void Exit(const std::string& worker, const std::string& job, int attempt, int rank, int code,
            const std::string& tail = "") {
    HeartbeatRequest hb = RankBeat(worker, job, attempt, rank, RankStatus::EXITED);
    hb.mutable_ranks(0)->set_exit_code(code);
    hb.mutable_ranks(0)->set_log_tail(tail);
    auto resp = core_->Heartbeat(hb);
    ASSERT_TRUE(resp.ok());
    EXPECT_FALSE(resp->reregister());
  }
  void Beat(const std::string& worker) {
    HeartbeatRequest hb;
    hb.set_worker_id(worker);
    ASSERT_TRUE(core_->Heartbeat(hb).ok());
  }
  void Commit(const std::string& job, int attempt, int64_t step, int files) {
    for (int f = 0; f < files; ++f) {
      CheckpointReport r;
      r.set_job_id(job);
      r.set_attempt(attempt);
      r.set_rank(f);
      r.set_step(step);
      r.set_path(absl::StrCat("/ckpt/", job, "/step_", step));
      r.add_files(absl::StrCat("shard_", f, ".bin"));
      r.set_expected_files(files);
      if (f == 0) {
        r.add_files("MANIFEST.json");
        r.set_manifest_committed(true);
      }
      ASSERT_TRUE(core_->ReportCheckpoint(r).ok());
    }
  }
  bool HasEvent(const JobStatus& st, const std::string& kind) {
    for (const JobEvent& e : st.events()) {
      if (e.kind() == kind) return true;
    }
    return false;
  }

  FakeClock clock_;
  std::unique_ptr<CoordinatorCore> core_;
};

TEST_F(CoreTest, BadSpecIsInvalidArgumentNamingTheField) {
  auto r = core_->SubmitJob(Spec("ok", 0));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("world_size"), std::string::npos) << r.status();
  r = core_->SubmitJob(Spec("bad name!", 1));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("name"), std::string::npos);
  JobSpec hybrid = Spec("h", 4);
  hybrid.mutable_fsdp()->set_hybrid_shard_degree(3);
  r = core_->SubmitJob(hybrid);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("fsdp.hybrid_shard_degree"), std::string::npos);
  EXPECT_TRUE(core_->ListJobs({}).empty());
}

TEST_F(CoreTest, GangSchedulesAllRanksOrNone) {
  const std::string a = Register("a", 2);
  auto job = core_->SubmitJob(Spec("big", 3));
  ASSERT_TRUE(job.ok());
  auto st = core_->GetJob(*job);
  EXPECT_EQ(st->state(), PENDING);
  EXPECT_NE(st->message().find("waiting for 3 CPU slots (2 free"), std::string::npos)
      << st->message();
  EXPECT_EQ(core_->ListWorkers()[0].busy_slots(), 0);  // nothing partially placed
  const std::string b = Register("b", 2);
  st = core_->GetJob(*job);
  ASSERT_EQ(st->state(), RUNNING);
  EXPECT_EQ(st->attempt(), 1);
  ASSERT_EQ(st->placement_size(), 3);
  // One shard group of 3: two ranks on one node, one on the other.
  auto ga = Drain(a, *core_->OpenAssignmentStream(a));
  auto gb = Drain(b, *core_->OpenAssignmentStream(b));
  EXPECT_EQ(ga.size() + gb.size(), 3u);
  for (const auto* list : {&ga, &gb}) {
    for (const Assignment& x : *list) {
      EXPECT_EQ(x.action(), Assignment::START);
      EXPECT_EQ(x.world_size(), 3);
      // The trainer's groups, from the assignment's world size and spec (fsdp/layout.h).
      auto layout =
          fsdp::ParallelLayout::Create(x.world_size(), x.spec().fsdp().sharding_strategy(),
                                       x.spec().fsdp().hybrid_shard_degree());
      ASSERT_TRUE(layout.ok()) << layout.status();
      EXPECT_EQ(layout->ShardGroupRanks(x.rank()).size(), 3u);
      EXPECT_EQ(layout->ReplicateGroupRanks(x.rank()).size(), 1u);
      EXPECT_EQ(st->placement(x.rank()).shard_group(), 0);
      EXPECT_EQ(st->placement(x.rank()).replicate_group(), x.rank());
      EXPECT_EQ(x.local_world_size(), static_cast<int>(list->size()));
      EXPECT_EQ(x.rendezvous_namespace(), *job + "/1");
      EXPECT_EQ(x.rendezvous_secret().size(), 64u);
      EXPECT_EQ(x.spec().name(), "big");
      EXPECT_FALSE(x.master_addr().empty());
    }
  }
}

TEST_F(CoreTest, PriorityThenSubmissionOrder) {
  auto low = core_->SubmitJob(Spec("low", 2));
  auto first = core_->SubmitJob(Spec("first", 2));
  JobSpec hi = Spec("high", 2);
  hi.set_priority(5);
  auto high = core_->SubmitJob(hi);
  auto second = core_->SubmitJob(Spec("second", 2));
  const std::string a = Register("a", 2);
  EXPECT_EQ(core_->GetJob(*high)->state(), RUNNING);
  EXPECT_EQ(core_->GetJob(*low)->state(), PENDING);
  // The high job finishes; the oldest of the equal-priority jobs goes next.
  Exit(a, *high, 1, 0, 0);
  Exit(a, *high, 1, 1, 0);
  EXPECT_EQ(core_->GetJob(*high)->state(), SUCCEEDED);
  EXPECT_TRUE(HasEvent(*core_->GetJob(*high), "SUCCEEDED"));
  EXPECT_EQ(core_->GetJob(*low)->state(), RUNNING);
  EXPECT_EQ(core_->GetJob(*first)->state(), PENDING);
  EXPECT_EQ(core_->GetJob(*second)->state(), PENDING);
}

TEST_F(CoreTest, FailedRankRestartsFromLatestCommittedCheckpointAfterBackoff) {
  const std::string a = Register("a", 2);
  JobSpec spec = Spec("r", 2, /*max_restarts=*/1);
  spec.mutable_restart()->set_backoff_s(3);
  auto job = core_->SubmitJob(spec);
  ASSERT_EQ(core_->GetJob(*job)->state(), RUNNING);
  Commit(*job, 1, 10, 2);
  Commit(*job, 1, 20, 2);
  EXPECT_EQ(core_->GetJob(*job)->latest_checkpoint_step(), 20);
  Exit(a, *job, 1, 1, 3, "line one\nRuntimeError: boom\n");
  auto st = core_->GetJob(*job);
  EXPECT_EQ(st->state(), PENDING);
  EXPECT_TRUE(HasEvent(*st, "RANK_FAILED"));
  EXPECT_TRUE(HasEvent(*st, "RESTARTING"));
  EXPECT_NE(st->message().find("rank 1 on node a exited with code 3: RuntimeError: boom"),
            std::string::npos)
      << st->message();
  // STOP went to the worker; nothing starts during the backoff.
  const int64_t gen = *core_->OpenAssignmentStream(a);
  EXPECT_TRUE(Drain(a, gen).empty());
  clock_.Advance(absl::Seconds(2));
  Beat(a);
  core_->Tick();
  EXPECT_EQ(core_->GetJob(*job)->state(), PENDING);
  clock_.Advance(absl::Seconds(2));
  Beat(a);
  core_->Tick();
  st = core_->GetJob(*job);
  ASSERT_EQ(st->state(), RUNNING);
  EXPECT_EQ(st->attempt(), 2);
  auto starts = Drain(a, gen);
  ASSERT_EQ(starts.size(), 2u);
  EXPECT_EQ(starts[0].resume_step(), 20);
  EXPECT_EQ(starts[0].attempt(), 2);
  EXPECT_EQ(starts[0].rendezvous_namespace(), *job + "/2");
  // Reports of the old attempt no longer count.
  ProgressReport old;
  old.set_job_id(*job);
  old.set_attempt(1);
  EXPECT_EQ(core_->ReportProgress(old).code(), absl::StatusCode::kFailedPrecondition);
  // The second failure uses up the restarts.
  Exit(a, *job, 2, 0, -9);
  st = core_->GetJob(*job);
  EXPECT_EQ(st->state(), FAILED);
  EXPECT_NE(st->message().find("killed by signal 9"), std::string::npos) << st->message();
}

TEST_F(CoreTest, SlotOfAStoppedRankStaysReservedUntilItExits) {
  // Issue #21 item 3: the restart backoff (1 s here) is shorter than the STOP's grace period
  // (10 s); a rank that ignores SIGTERM holds its device for the whole grace. The next attempt
  // must not be placed on that slot before the rank is reported EXITED.
  const std::string a = Register("a", 2);
  JobSpec spec = Spec("g", 2, /*max_restarts=*/1);
  spec.mutable_restart()->set_backoff_s(1);
  auto job = core_->SubmitJob(spec);
  ASSERT_EQ(core_->GetJob(*job)->state(), RUNNING);
  auto status = [&](int attempt, int rank, RankStatus::State state, int code) {
    RankStatus rs;
    rs.set_job_id(*job);
    rs.set_attempt(attempt);
    rs.set_rank(rank);
    rs.set_state(state);
    rs.set_exit_code(code);
    return rs;
  };
  auto beat = [&](std::vector<RankStatus> ranks) {
    HeartbeatRequest hb;
    hb.set_worker_id(a);
    for (RankStatus& r : ranks) *hb.add_ranks() = std::move(r);
    ASSERT_TRUE(core_->Heartbeat(hb).ok());
  };
  beat({status(1, 0, RankStatus::RUNNING, 0), status(1, 1, RankStatus::RUNNING, 0)});
  // Rank 1 fails; rank 0 gets a STOP and ignores SIGTERM.
  beat({status(1, 0, RankStatus::RUNNING, 0), status(1, 1, RankStatus::EXITED, 3)});
  ASSERT_EQ(core_->GetJob(*job)->state(), PENDING);
  EXPECT_EQ(core_->ListWorkers()[0].busy_slots(), 1);  // rank 1's slot is free, rank 0's not
  for (int s = 0; s < 10; ++s) {  // the whole grace period, far past the backoff
    clock_.Advance(absl::Seconds(1));
    beat({status(1, 0, RankStatus::RUNNING, 0), status(1, 1, RankStatus::EXITED, 3)});
    core_->Tick();
    ASSERT_EQ(core_->GetJob(*job)->state(), PENDING) << "second " << s;
    EXPECT_EQ(core_->ListWorkers()[0].busy_slots(), 1);
  }
  // SIGKILL: the rank exits; its slot is free and attempt 2 gets both slots.
  beat({status(1, 0, RankStatus::EXITED, -9), status(1, 1, RankStatus::EXITED, 3)});
  auto st = core_->GetJob(*job);
  ASSERT_EQ(st->state(), RUNNING);
  EXPECT_EQ(st->attempt(), 2);
  EXPECT_EQ(st->placement_size(), 2);
  EXPECT_EQ(core_->ListWorkers()[0].busy_slots(), 2);
}

TEST_F(CoreTest, SlotOfAStoppedRankIsFreedWhenItsWorkerStopsListingItOrDies) {
  const std::string a = Register("a", 1);
  const std::string b = Register("b", 1);
  auto job = core_->SubmitJob(Spec("d", 2));
  ASSERT_EQ(core_->GetJob(*job)->state(), RUNNING);
  for (const std::string& w : {a, b}) {
    const int rank = core_->GetJob(*job)->placement(0).worker_id() == w ? 0 : 1;
    const HeartbeatRequest hb = RankBeat(w, *job, 1, rank, RankStatus::RUNNING);
    ASSERT_TRUE(core_->Heartbeat(hb).ok());
  }
  ASSERT_TRUE(core_->CancelJob(*job, "").ok());
  EXPECT_EQ(core_->ListWorkers()[0].busy_slots(), 1);
  EXPECT_EQ(core_->ListWorkers()[1].busy_slots(), 1);
  Beat(a);  // a no longer lists its rank: gone
  EXPECT_EQ(core_->ListWorkers()[0].busy_slots(), 0);
  EXPECT_EQ(core_->ListWorkers()[1].busy_slots(), 1);
  clock_.Advance(absl::Seconds(6));  // b goes silent and is declared lost
  Beat(a);
  core_->Tick();
  EXPECT_EQ(core_->ListWorkers()[1].state(), WorkerInfo::DEAD);
  EXPECT_EQ(core_->ListWorkers()[1].busy_slots(), 0);
}

// A trainer fast enough to report progress before its worker's next heartbeat lists it (seen
// in CI: a job cancelled 0.8 s after it started, at step 2) still holds its slot: its worker was
// handed the START. Only a START still queued frees the slot at once.
TEST_F(CoreTest, SlotOfARankHandedItsStartButNotYetListedWaitsForTheNextHeartbeat) {
  const std::string a = Register("a", 2);
  const int64_t gen = *core_->OpenAssignmentStream(a);
  auto first = core_->SubmitJob(Spec("fast", 1));
  ASSERT_EQ(Drain(a, gen).size(), 1u);                // handed, never listed in a heartbeat
  auto queued = core_->SubmitJob(Spec("queued", 1));  // its START not taken yet
  ASSERT_EQ(core_->GetJob(*queued)->state(), RUNNING);
  ASSERT_TRUE(core_->CancelJob(*first, "").ok());
  ASSERT_TRUE(core_->CancelJob(*queued, "").ok());
  EXPECT_EQ(core_->ListWorkers()[0].busy_slots(), 1);  // the handed rank's slot waits
  auto next = core_->SubmitJob(Spec("next", 2));
  EXPECT_EQ(core_->GetJob(*next)->state(), PENDING);
  ASSERT_TRUE(core_->Heartbeat(RankBeat(a, *first, 1, 0, RankStatus::RUNNING)).ok());
  EXPECT_EQ(core_->GetJob(*next)->state(), PENDING);  // it does run: still held
  Exit(a, *first, 1, 0, -9);
  EXPECT_EQ(core_->GetJob(*next)->state(), RUNNING);
}

TEST_F(CoreTest, WorkerLostWhileItsStoppedRanksHoldSlotsIsNotedAndTheJobRestartsSmaller) {
  // A node dies: its peers fail first (RANK_FAILED), the node's own stopped ranks keep their
  // slots until it is declared dead; then the job notes WORKER_LOST and restarts without it.
  const std::string a = Register("a", 1);
  const std::string b = Register("b", 1);
  JobSpec spec = Spec("n", 2, /*max_restarts=*/1);
  spec.mutable_elastic()->set_min_world_size(1);
  auto job = core_->SubmitJob(spec);
  ASSERT_EQ(core_->GetJob(*job)->state(), RUNNING);
  for (const std::string& w : {a, b}) {
    const HeartbeatRequest hb =
        RankBeat(w, *job, 1, core_->GetJob(*job)->placement(0).worker_id() == w ? 0 : 1,
                 RankStatus::RUNNING);
    ASSERT_TRUE(core_->Heartbeat(hb).ok());
  }
  const int rank_on_a = core_->GetJob(*job)->placement(0).worker_id() == a ? 0 : 1;
  Exit(a, *job, 1, rank_on_a, 4, "lost a peer");
  ASSERT_EQ(core_->GetJob(*job)->state(), PENDING);
  for (int i = 0; i < 6; ++i) {  // b is silent: its rank holds its slot until b is dead
    clock_.Advance(absl::Seconds(1));
    Beat(a);
    core_->Tick();
  }
  auto st = core_->GetJob(*job);
  ASSERT_TRUE(HasEvent(*st, "WORKER_LOST"));
  for (const JobEvent& e : st->events()) {
    if (e.kind() != "WORKER_LOST") continue;
    EXPECT_NE(e.message().find(
                  absl::StrCat("stopped ranks [", 1 - rank_on_a, "] of attempt 1 lost with it")),
              std::string::npos)
        << e.message();
  }
  ASSERT_EQ(st->state(), RUNNING);
  EXPECT_EQ(st->attempt(), 2);
  EXPECT_EQ(st->world_size(), 1);
  EXPECT_EQ(st->placement(0).worker_id(), a);
}

TEST_F(CoreTest, LostWorkerFailsAttemptAndElasticRestartShrinksTheWorld) {
  const std::string a = Register("a", 2);
  const std::string b = Register("b", 2);
  JobSpec spec = Spec("e", 4, /*max_restarts=*/2);
  spec.mutable_elastic()->set_min_world_size(2);
  auto job = core_->SubmitJob(spec);
  ASSERT_EQ(core_->GetJob(*job)->state(), RUNNING);
  Commit(*job, 1, 50, 4);
  for (int i = 0; i < 6; ++i) {
    clock_.Advance(absl::Seconds(1));
    Beat(a);  // b stays silent
    core_->Tick();
  }
  auto st = core_->GetJob(*job);
  EXPECT_TRUE(HasEvent(*st, "WORKER_LOST"));
  ASSERT_EQ(st->state(), RUNNING);  // restarted at once (no backoff) on what is left
  EXPECT_EQ(st->attempt(), 2);
  EXPECT_EQ(st->world_size(), 2);
  for (const RankPlacement& p : st->placement()) EXPECT_EQ(p.worker_id(), a);
  EXPECT_NE(st->events(st->events_size() - 1).message().find("elastic: world shrunk from 4"),
            std::string::npos);
  auto workers = core_->ListWorkers();
  EXPECT_EQ(workers[1].state(), WorkerInfo::DEAD);
  // The dead worker is told to re-register.
  HeartbeatRequest hb;
  hb.set_worker_id(b);
  EXPECT_TRUE(core_->Heartbeat(hb)->reregister());
  // The partition scenario (#30): while b stays cut off, a failure of the shrunk attempt
  // restarts it on a alone again; b's late heartbeats do not bring it back.
  Exit(a, *job, 2, 0, 4, "timed out");
  EXPECT_TRUE(core_->Heartbeat(hb)->reregister());
  st = core_->GetJob(*job);
  ASSERT_EQ(st->state(), RUNNING);
  EXPECT_EQ(st->attempt(), 3);
  EXPECT_EQ(st->world_size(), 2);
  for (const RankPlacement& p : st->placement()) EXPECT_EQ(p.worker_id(), a);
  EXPECT_EQ(core_->ListWorkers()[1].state(), WorkerInfo::DEAD);
}

// Grow-back (issue 33 item 3): the job shrank when b was lost; once b registers again, the
// job's next committed checkpoint ends the small attempt (GROWING, no restart counted) and the
// next attempt runs at the spec's world from that checkpoint.
TEST_F(CoreTest, ShrunkElasticJobGrowsBackAtItsNextCheckpointWhenSlotsReturn) {
  const std::string a = Register("a", 2);
  Register("b", 2);
  JobSpec spec = Spec("g", 4, /*max_restarts=*/1);
  spec.mutable_elastic()->set_min_world_size(2);
  auto job = core_->SubmitJob(spec);
  ASSERT_EQ(core_->GetJob(*job)->state(), RUNNING);
  Commit(*job, 1, 10, 4);
  for (int i = 0; i < 6; ++i) {
    clock_.Advance(absl::Seconds(1));
    Beat(a);  // b stays silent: lost
    core_->Tick();
  }
  ASSERT_EQ(core_->GetJob(*job)->attempt(), 2);
  ASSERT_EQ(core_->GetJob(*job)->world_size(), 2);
  // No slots have come back: a commit changes nothing.
  Commit(*job, 2, 20, 2);
  EXPECT_EQ(core_->GetJob(*job)->state(), RUNNING);
  EXPECT_FALSE(HasEvent(*core_->GetJob(*job), "GROWING"));

  Register("b", 2);                                  // the node returns
  EXPECT_EQ(core_->GetJob(*job)->state(), RUNNING);  // nothing happens before the next commit
  Commit(*job, 2, 30, 2);
  auto st = core_->GetJob(*job);
  ASSERT_TRUE(HasEvent(*st, "GROWING"));
  EXPECT_EQ(st->events(st->events_size() - 1).message(),
            "slots for 4 ranks are free: growing from 2 to 4 ranks (spec world_size 4) from "
            "checkpoint step 30");
  for (int r = 0; r < 2; ++r) Exit(a, *job, 2, r, 143);  // the stopped ranks exit
  core_->Tick();
  st = core_->GetJob(*job);
  ASSERT_EQ(st->state(), RUNNING) << st->message();
  EXPECT_EQ(st->attempt(), 3);
  EXPECT_EQ(st->world_size(), 4);
  EXPECT_NE(st->events(st->events_size() - 1).message().find("resuming from checkpoint step 30"),
            std::string::npos);
  int restarting = 0;
  for (const JobEvent& e : st->events()) restarting += e.kind() == "RESTARTING";
  EXPECT_EQ(restarting, 1);  // the loss of b only: growing is not a restart
  // At full width a commit does not grow again; the restart budget (1) is still there.
  Commit(*job, 3, 40, 4);
  EXPECT_EQ(core_->GetJob(*job)->attempt(), 3);
  EXPECT_EQ(core_->GetJob(*job)->state(), RUNNING);
}

TEST_F(CoreTest, RankMissingFromItsWorkersHeartbeatIsLost) {
  const std::string a = Register("a", 2);
  auto job = core_->SubmitJob(Spec("l", 2, /*max_restarts=*/1));
  HeartbeatRequest hb;
  hb.set_worker_id(a);
  for (int r = 0; r < 2; ++r) {
    RankStatus* rs = hb.add_ranks();
    rs->set_job_id(*job);
    rs->set_attempt(1);
    rs->set_rank(r);
    rs->set_state(RankStatus::RUNNING);
  }
  ASSERT_TRUE(core_->Heartbeat(hb).ok());
  // Rank 0 finishes; later the daemon forgets it: that is not a loss.
  hb.mutable_ranks(0)->set_state(RankStatus::EXITED);
  ASSERT_TRUE(core_->Heartbeat(hb).ok());
  hb.mutable_ranks()->DeleteSubrange(0, 1);
  ASSERT_TRUE(core_->Heartbeat(hb).ok());
  EXPECT_EQ(core_->GetJob(*job)->state(), RUNNING);
  // The daemon restarts and heartbeats without rank 1: the attempt failed.
  Beat(a);
  auto st = core_->GetJob(*job);
  ASSERT_TRUE(HasEvent(*st, "RANK_LOST"));
  for (const JobEvent& e : st->events()) {
    if (e.kind() != "RANK_LOST") continue;
    EXPECT_NE(e.message().find("rank 1 on node a is no longer reported"), std::string::npos)
        << e.message();
  }
  EXPECT_EQ(st->attempt(), 2);  // restarted at once (no backoff)
}

TEST_F(CoreTest, GetCheckpointRefusesAManifestThatIsNotARegularFileWithoutBlocking) {
  // Issue #21 item 8: a FIFO at <reported path>/MANIFEST.json blocked the gRPC thread forever.
  Register("a", 1);
  auto job = core_->SubmitJob(Spec("f", 1));
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/fifo/" + *job + "/step_5";
  ASSERT_EQ(std::system(("mkdir -p " + dir).c_str()), 0);
  ASSERT_EQ(::mkfifo((dir + "/MANIFEST.json").c_str(), 0600), 0);
  CheckpointReport r;
  r.set_job_id(*job);
  r.set_attempt(1);
  r.set_step(5);
  r.set_path(dir);
  r.add_files("shard_00000.bin");
  r.add_files("MANIFEST.json");
  r.set_expected_files(1);
  r.set_manifest_committed(true);
  ASSERT_TRUE(core_->ReportCheckpoint(r).ok());
  const absl::Time start = absl::Now();
  auto got = core_->GetCheckpoint(*job, 5);
  EXPECT_LT(absl::Now() - start, absl::Seconds(4));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(got.status().message(),
            dir + "/MANIFEST.json is not a regular file (a FIFO); not read");
  EXPECT_EQ(core_->ListCheckpoints(*job)->size(), 1u);  // the rest keeps working
}

TEST_F(CoreTest, CheckpointsAreListedWithManifestAndRetained) {
  Register("a", 1);
  auto job = core_->SubmitJob(Spec("k", 1));  // keep_last 2
  // Step 30's directory exists here with a manifest; the others only as records.
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/ckpt/" + *job;
  ASSERT_EQ(std::system(("mkdir -p " + dir + "/step_30").c_str()), 0);
  std::ofstream(dir + "/step_30/MANIFEST.json")
      << R"({"formatVersion": 1, "step": "30", "worldSize": 1, "shardingStrategy": "FULL_SHARD"})";
  for (int64_t step : {10, 20, 30}) {
    CheckpointReport r;
    r.set_job_id(*job);
    r.set_attempt(1);
    r.set_step(step);
    r.set_path(step == 30 ? dir + "/step_30" : absl::StrCat("/elsewhere/step_", step));
    r.add_files("shard_00000.bin");
    r.add_files("MANIFEST.json");
    r.set_expected_files(1);
    r.set_manifest_committed(true);
    ASSERT_TRUE(core_->ReportCheckpoint(r).ok());
  }
  auto list = core_->ListCheckpoints(*job);
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);  // step 10 dropped by keep_last = 2
  EXPECT_EQ((*list)[0].step(), 20);
  auto got = core_->GetCheckpoint(*job, 30);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(got->info().committed());
  EXPECT_EQ(got->manifest().step(), 30);
  EXPECT_EQ(got->manifest().sharding_strategy(), "FULL_SHARD");
  EXPECT_FALSE(core_->GetCheckpoint(*job, 20)->has_manifest());
  EXPECT_EQ(core_->GetCheckpoint(*job, 10).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(core_->GetJob(*job)->latest_checkpoint_step(), 30);
  EXPECT_EQ(core_->ListCheckpoints("job-77").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(CoreTest, RanksOfAnOverAttemptStillRunningAreStopped) {
  const std::string a = Register("a", 1);
  auto job = core_->SubmitJob(Spec("z", 1, /*max_restarts=*/1));
  // a goes silent and is declared dead; the attempt fails and waits for slots.
  clock_.Advance(absl::Seconds(6));
  core_->Tick();
  ASSERT_EQ(core_->GetJob(*job)->state(), PENDING);
  // a comes back with its old rank still running: it is told to stop attempt 1 (once).
  ASSERT_EQ(Register("a", 1), a);
  const int64_t gen = *core_->OpenAssignmentStream(a);
  auto first = Drain(a, gen);  // attempt 2's START (it fits again)
  const HeartbeatRequest hb = RankBeat(a, *job, 1, 0, RankStatus::RUNNING);
  ASSERT_TRUE(core_->Heartbeat(hb).ok());
  ASSERT_TRUE(core_->Heartbeat(hb).ok());
  auto stops = Drain(a, gen);
  ASSERT_EQ(stops.size(), 1u);
  EXPECT_EQ(stops[0].action(), Assignment::STOP);
  EXPECT_EQ(stops[0].attempt(), 1);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].action(), Assignment::START);
  EXPECT_EQ(first[0].attempt(), 2);
}

TEST_F(CoreTest, MadeUpAttemptsInHeartbeatsQueueAtMostTheStreamBoundOfStops) {
  const std::string a = Register("a", 1);
  const int64_t gen = *core_->OpenAssignmentStream(a);
  HeartbeatRequest hb;
  hb.set_worker_id(a);
  for (int i = 0; i < 1000; ++i) {
    RankStatus* rs = hb.add_ranks();
    rs->set_job_id(absl::StrCat("job-made-up-", i));
    rs->set_attempt(1);
    rs->set_state(RankStatus::RUNNING);
  }
  ASSERT_TRUE(core_->Heartbeat(hb).ok());
  const std::vector<Assignment> stops = Drain(a, gen);
  ASSERT_EQ(stops.size(), RankTracker::kMaxStopsPerStream);
  EXPECT_EQ(stops[0].action(), Assignment::STOP);
  // More made-up jobs queue nothing more on this stream; a new stream starts from zero.
  hb.mutable_ranks(0)->set_job_id("job-made-up-again");
  ASSERT_TRUE(core_->Heartbeat(hb).ok());
  EXPECT_TRUE(Drain(a, gen).empty());
  const int64_t gen2 = *core_->OpenAssignmentStream(a);
  ASSERT_TRUE(core_->Heartbeat(hb).ok());
  EXPECT_EQ(Drain(a, gen2).size(), RankTracker::kMaxStopsPerStream);
}

TEST_F(CoreTest, RankNeverReportedFailsTheAttemptAfterTheStartTimeout) {
  const std::string a = Register("a", 2);
  auto job = core_->SubmitJob(Spec("t", 2));
  const HeartbeatRequest hb = RankBeat(a, *job, 1, 0, RankStatus::STARTING);
  for (int i = 0; i < 29; ++i) {
    clock_.Advance(absl::Seconds(1));
    ASSERT_TRUE(core_->Heartbeat(hb).ok());  // only rank 0 ever shows up
    core_->Tick();
  }
  EXPECT_EQ(core_->GetJob(*job)->state(), RUNNING);
  clock_.Advance(absl::Seconds(2));
  ASSERT_TRUE(core_->Heartbeat(hb).ok());
  core_->Tick();
  auto st = core_->GetJob(*job);
  EXPECT_EQ(st->state(), FAILED);
  EXPECT_TRUE(HasEvent(*st, "RANK_START_TIMEOUT"));
  EXPECT_NE(st->message().find("ranks [1 (a)] were not reported"), std::string::npos)
      << st->message();
}

TEST_F(CoreTest, DeviceKindsQueueSeparatelyAndListFiltersByState) {
  RegisterWorkerRequest gpu = Worker("g", 0);
  for (int i = 0; i < 2; ++i) {
    Slot* s = gpu.add_slots();
    s->set_kind(Slot::CUDA);
    s->set_index(i);
  }
  ASSERT_TRUE(core_->RegisterWorker(gpu).ok());
  JobSpec big_gpu = Spec("big-gpu", 4);
  big_gpu.mutable_device()->set_kind(DeviceSpec::CUDA);
  big_gpu.set_priority(10);
  JobSpec small_gpu = Spec("small-gpu", 2);
  small_gpu.mutable_device()->set_kind(DeviceSpec::CUDA);
  auto big = core_->SubmitJob(big_gpu);
  auto small = core_->SubmitJob(small_gpu);
  auto cpu = core_->SubmitJob(Spec("cpu", 1));
  Register("c", 1);
  // The big GPU job blocks later GPU jobs (no starvation), not CPU jobs.
  EXPECT_EQ(core_->GetJob(*big)->state(), PENDING);
  EXPECT_EQ(core_->GetJob(*small)->state(), PENDING);
  EXPECT_EQ(core_->GetJob(*cpu)->state(), RUNNING);
  EXPECT_EQ(core_->GetJob(*cpu)->placement(0).node_name(), "c");
  EXPECT_EQ(core_->ListJobs({PENDING}).size(), 2u);
  EXPECT_EQ(core_->ListJobs({RUNNING}).size(), 1u);
  EXPECT_EQ(core_->ListJobs({RUNNING, PENDING}).size(), 3u);
  EXPECT_EQ(core_->ListJobs({}).size(), 3u);
  ASSERT_TRUE(core_->CancelJob(*big, "too big").ok());
  EXPECT_EQ(core_->GetJob(*small)->state(), RUNNING);
}

TEST_F(CoreTest, CancelStopsRanksAndIsFinal) {
  const std::string a = Register("a", 2);
  auto job = core_->SubmitJob(Spec("c", 2));
  const int64_t gen = *core_->OpenAssignmentStream(a);
  EXPECT_EQ(Drain(a, gen).size(), 2u);
  ASSERT_TRUE(core_->CancelJob(*job, "no longer needed").ok());
  auto stops = Drain(a, gen);
  ASSERT_EQ(stops.size(), 1u);
  EXPECT_EQ(stops[0].action(), Assignment::STOP);
  EXPECT_EQ(stops[0].job_id(), *job);
  EXPECT_EQ(core_->GetJob(*job)->state(), CANCELLED);
  // Its worker was handed the STARTs: the slots wait for a heartbeat saying they do not run.
  EXPECT_EQ(core_->ListWorkers()[0].busy_slots(), 2);
  Beat(a);
  EXPECT_EQ(core_->ListWorkers()[0].busy_slots(), 0);
  absl::Status again = core_->CancelJob(*job, "");
  EXPECT_EQ(again.code(), absl::StatusCode::kFailedPrecondition);
  // In the user's words, not the state machine's ("illegal transition CANCELLED -> CANCELLED").
  EXPECT_EQ(
      again.message(),
      absl::StrCat("job ", *job, " has already ended (CANCELLED): there is nothing to cancel"));
  EXPECT_EQ(core_->CancelJob("job-999", "").code(), absl::StatusCode::kNotFound);
}

// The heartbeats of a cancelled job's ranks while they stop (SIGTERM, the grace period) queue no
// second STOP: the cancel's is on the stream. A new stream (a STOP still queued is lost with the
// old one) gets one again.
TEST_F(CoreTest, RanksStoppingAfterACancelGetNoSecondStopOnTheSameStream) {
  const std::string a = Register("a", 2);
  auto job = core_->SubmitJob(Spec("g", 2));
  const int64_t gen = *core_->OpenAssignmentStream(a);
  ASSERT_EQ(Drain(a, gen).size(), 2u);
  ASSERT_TRUE(core_->Heartbeat(RankBeat(a, *job, 1, 0, RankStatus::RUNNING)).ok());
  ASSERT_TRUE(core_->CancelJob(*job, "").ok());
  auto stops = Drain(a, gen);
  ASSERT_EQ(stops.size(), 1u);
  EXPECT_EQ(stops[0].action(), Assignment::STOP);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(core_->Heartbeat(RankBeat(a, *job, 1, 0, RankStatus::RUNNING)).ok());
  }
  EXPECT_TRUE(Drain(a, gen).empty());
  const int64_t gen2 = *core_->OpenAssignmentStream(a);
  ASSERT_TRUE(core_->Heartbeat(RankBeat(a, *job, 1, 0, RankStatus::RUNNING)).ok());
  auto again = Drain(a, gen2);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].action(), Assignment::STOP);
  EXPECT_EQ(again[0].attempt(), 1);
}

TEST_F(CoreTest, NewStreamSupersedesOldAndResendsUnacknowledgedStarts) {
  const std::string a = Register("a", 2);
  auto job = core_->SubmitJob(Spec("s", 2));
  const int64_t g1 = *core_->OpenAssignmentStream(a);
  const int64_t g2 = *core_->OpenAssignmentStream(a);
  Assignment x;
  EXPECT_EQ(core_->NextAssignment(a, g1, absl::ZeroDuration(), &x).status().code(),
            absl::StatusCode::kAborted);
  EXPECT_EQ(Drain(a, g2).size(), 2u);
  // The daemon reports rank 0 running: only rank 1's START is sent again on a new stream.
  const HeartbeatRequest hb = RankBeat(a, *job, 1, 0, RankStatus::RUNNING);
  ASSERT_TRUE(core_->Heartbeat(hb).ok());
  auto again = Drain(a, *core_->OpenAssignmentStream(a));
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].rank(), 1);
}

TEST_F(CoreTest, RendezvousOnlyWithTheAttemptsSecret) {
  const std::string a = Register("a", 1);
  auto job = core_->SubmitJob(Spec("z", 1));
  auto starts = Drain(a, *core_->OpenAssignmentStream(a));
  ASSERT_EQ(starts.size(), 1u);
  const RendezvousSetRequest set = RendezvousSetFor(starts[0], "k", "v");
  ASSERT_TRUE(core_->RendezvousSet(set).ok());
  RendezvousGetRequest get;
  get.set_namespace_(set.namespace_());
  get.set_secret("wrong");
  get.add_keys("k");
  EXPECT_EQ(core_->RendezvousGet(get).status().code(), absl::StatusCode::kPermissionDenied);
  get.set_secret(set.secret());
  EXPECT_EQ(core_->RendezvousGet(get)->values(0), "v");
}

TEST_F(CoreTest, RendezvousBytesPerNamespaceComeFromTheOptions) {
  Start("", [](CoreOptions& o) { o.rendezvous_limits.max_bytes_per_namespace = 100; });
  const std::string a = Register("a", 1);
  auto job = core_->SubmitJob(Spec("z", 1));
  auto starts = Drain(a, *core_->OpenAssignmentStream(a));
  ASSERT_EQ(starts.size(), 1u);
  const absl::Status s =
      core_->RendezvousSet(RendezvousSetFor(starts[0], "k", std::string(100, 'v')));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_THAT(std::string(s.message()),
              ::testing::HasSubstr("limit 100 (--rendezvous_max_bytes_per_namespace)"));
}

TEST_F(CoreTest, EventsPerJobKeepTheNewestAndCountTheRest) {
  Start("", [](CoreOptions& o) { o.max_events_per_job = 2; });
  Register("a", 1);
  auto job = core_->SubmitJob(Spec("e", 1));  // SUBMITTED, then SCHEDULED at the next tick
  ASSERT_TRUE(job.ok()) << job.status();
  core_->Tick();
  ASSERT_TRUE(core_->CancelJob(*job, "enough").ok());
  auto st = core_->GetJob(*job);
  ASSERT_TRUE(st.ok()) << st.status();
  ASSERT_EQ(st->events_size(), 2);
  EXPECT_EQ(st->events(1).kind(), "CANCELLED");
  EXPECT_EQ(st->events_dropped(), 1);
}

TEST_F(CoreTest, ListJobsPagesInSubmissionOrder) {
  Start("", [](CoreOptions& o) { o.max_list_page_size = 2; });
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) {
    auto job = core_->SubmitJob(Spec(absl::StrCat("p", i), 1));
    ASSERT_TRUE(job.ok()) << job.status();
    ids.push_back(*job);
  }
  ListJobsRequest req;  // page_size 0: the default, here the max (2)
  std::vector<std::string> seen;
  int pages = 0;
  do {
    auto page = core_->ListJobsPage(req);
    ASSERT_TRUE(page.ok()) << page.status();
    EXPECT_LE(page->jobs_size(), 2);
    for (const JobStatus& j : page->jobs()) seen.push_back(j.job_id());
    req.set_page_token(page->next_page_token());
    ++pages;
  } while (!req.page_token().empty() && pages < 10);
  EXPECT_EQ(seen, ids);
  EXPECT_EQ(pages, 3);
  // States filter per page as well.
  ASSERT_TRUE(core_->CancelJob(ids[1], "x").ok());
  ListJobsRequest cancelled;
  cancelled.add_states(CANCELLED);
  auto only = core_->ListJobsPage(cancelled);
  ASSERT_TRUE(only.ok());
  ASSERT_EQ(only->jobs_size(), 1);
  EXPECT_EQ(only->jobs(0).job_id(), ids[1]);
  EXPECT_TRUE(only->next_page_token().empty());
  // Past the max, and a token it never issued: INVALID_ARGUMENT naming them.
  ListJobsRequest big;
  big.set_page_size(3);
  EXPECT_EQ(core_->ListJobsPage(big).status().message(),
            "page_size 3 is not in [0, 2] (--max_list_page_size)");
  ListJobsRequest forged;
  forged.set_page_token("abc");
  EXPECT_EQ(core_->ListJobsPage(forged).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(core_->ListJobsPage(forged).status().message(),
            "page_token \"abc\" was not issued by this coordinator");
}

TEST_F(CoreTest, FinishedJobsAreForgottenAfterTheirTtlInMemoryAndInTheStore) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/retention";
  const auto bounds = [](CoreOptions& o) {
    o.finished_job_ttl = absl::Hours(1);
    o.max_finished_jobs = 0;
  };
  Start(dir, bounds);
  const std::string w = Register("a", 1);
  auto done = core_->SubmitJob(Spec("done", 1));
  auto waiting = core_->SubmitJob(Spec("waiting", 4));  // never fits: PENDING for good
  ASSERT_TRUE(done.ok() && waiting.ok());
  core_->Tick();
  Commit(*done, 1, 10, 1);
  Exit(w, *done, 1, 0, 0);
  ASSERT_EQ(core_->GetJob(*done)->state(), SUCCEEDED);
  ASSERT_EQ(core_->ListCheckpoints(*done)->size(), 1u);
  clock_.Advance(absl::Minutes(59));
  core_->Tick();
  EXPECT_TRUE(core_->GetJob(*done).ok()) << "kept until its TTL";
  clock_.Advance(absl::Minutes(2));
  core_->Tick();
  EXPECT_EQ(core_->GetJob(*done).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(core_->ListCheckpoints(*done).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(core_->GetJob(*waiting).ok()) << "an unfinished job is never collected";
  // The store forgot it too: a restarted coordinator does not bring it back.
  Start(dir, bounds);
  EXPECT_EQ(core_->GetJob(*done).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(core_->GetJob(*waiting).ok());
}

TEST_F(CoreTest, FinishedJobsBeyondTheCountAreForgottenOldestFirst) {
  Start("", [](CoreOptions& o) { o.max_finished_jobs = 2; });
  std::vector<std::string> ids;
  for (int i = 0; i < 4; ++i) {
    auto job = core_->SubmitJob(Spec(absl::StrCat("c", i), 1));
    ASSERT_TRUE(job.ok()) << job.status();
    ASSERT_TRUE(core_->CancelJob(*job, "x").ok());
    clock_.Advance(absl::Seconds(1));
    ids.push_back(*job);
  }
  core_->Tick();
  EXPECT_EQ(core_->GetJob(ids[0]).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(core_->GetJob(ids[1]).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(core_->GetJob(ids[2]).ok());
  EXPECT_TRUE(core_->GetJob(ids[3]).ok());
  EXPECT_EQ(core_->ListJobs({}).size(), 2u);
}

TEST_F(CoreTest, BoundsBelowOneAreInvalidArgument) {
  CoreOptions o;
  o.clock = &clock_;
  o.max_events_per_job = 0;
  auto core = CoordinatorCore::Create(o);
  EXPECT_EQ(core.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(core.status().message()), ::testing::HasSubstr("--max_events_per_job"));
}

TEST_F(CoreTest, ProgressIsKeptAndWakesWatchers) {
  Register("a", 2);
  auto job = core_->SubmitJob(Spec("p", 2));
  int64_t v0 = 0;
  ASSERT_TRUE(core_->WaitJob(*job, 0, absl::ZeroDuration(), &v0).ok());
  std::thread reporter([&] {
    absl::SleepFor(absl::Milliseconds(50));
    ProgressReport r;
    r.set_job_id(*job);
    r.set_attempt(1);
    r.set_rank(0);
    r.set_step(40);
    r.set_loss(2.5);
    r.set_step_time_s(0.5);
    r.set_tokens_per_s(1000);
    r.set_peak_memory_bytes(123);
    EXPECT_TRUE(core_->ReportProgress(r).ok());
  });
  int64_t v1 = 0;
  auto st = core_->WaitJob(*job, v0, absl::Seconds(10), &v1);
  reporter.join();
  ASSERT_TRUE(st.ok());
  EXPECT_GT(v1, v0);
  EXPECT_EQ(st->step(), 40);
  EXPECT_DOUBLE_EQ(st->loss(), 2.5);
  EXPECT_DOUBLE_EQ(st->eta_s(), 30.0);  // 60 steps left at 0.5 s
  EXPECT_EQ(st->per_rank_peak_memory_bytes(0), 123);
  ProgressReport bad;
  bad.set_job_id(*job);
  bad.set_attempt(1);
  bad.set_rank(7);
  EXPECT_EQ(core_->ReportProgress(bad).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(CoreTest, FullStateDiskMakesTheCoordinatorReadOnlyUntilSpaceReturns) {
  // Issue #21 item 4: a failed state write was only logged, so a cancel answered OK could be
  // undone by the next restart. Now the RPC fails with the reason, user mutations are refused
  // while the write is retried, reads go on, and writes resume once space returns.
  using ::testing::HasSubstr;
  auto fs = testing::SmallFs::Create(std::string(std::getenv("TEST_TMPDIR")) + "/small", 1 << 20);
  if (!fs.ok()) GTEST_SKIP() << fs.status();
  const std::string dir = (*fs)->dir() + "/state";
  Start(dir);
  const std::string a = Register("a", 1);
  auto kept = core_->SubmitJob(Spec("kept", 1));
  ASSERT_TRUE(kept.ok()) << kept.status();
  ASSERT_TRUE((*fs)->Fill().ok());

  auto refused = core_->SubmitJob(Spec("refused", 1));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(refused.status().message(),
              HasSubstr("job not submitted: the state store cannot be written: sqlite write: "
                        "database or disk is full"));
  absl::Status cancel = core_->CancelJob(*kept, "");
  EXPECT_EQ(cancel.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(cancel.message(), HasSubstr("the cancel of job " + *kept +
                                          " is not durable: the state store cannot be written"));
  // Read-only: mutations are refused with the reason; reads keep working.
  auto again = core_->SubmitJob(Spec("refused", 1));
  EXPECT_EQ(again.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(again.status().message(),
              HasSubstr("coordinator is read-only: the state store cannot be written (sqlite "
                        "write: database or disk is full); reads keep working"));
  EXPECT_EQ(core_->GetJob(*kept)->state(), CANCELLED);
  EXPECT_EQ(core_->ListJobs({}).size(), 1u);
  EXPECT_EQ(core_->ListWorkers().size(), 1u);

  ASSERT_TRUE((*fs)->Free().ok());
  absl::StatusOr<std::string> after = absl::UnavailableError("not tried");
  for (int i = 0; i < 250 && !after.ok(); ++i) {
    absl::SleepFor(absl::Milliseconds(20));
    after = core_->SubmitJob(Spec("after", 1));
  }
  ASSERT_TRUE(after.ok()) << after.status();
  Start(dir);  // what was answered OK, and the cancel retried since, is on disk
  EXPECT_EQ(core_->GetJob(*kept)->state(), CANCELLED);
  EXPECT_EQ(core_->ListJobs({}).size(), 2u);
  EXPECT_EQ(core_->ListJobs({}).back().job_id(), *after);
}

TEST_F(CoreTest, StateSurvivesRestartAndRunningJobWaitsForItsWorkers) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/core_restart";
  Start(dir);
  const std::string a = Register("a", 2);
  auto done = core_->SubmitJob(Spec("done", 1));
  auto running = core_->SubmitJob(Spec("running", 1, /*max_restarts=*/1));
  auto waiting = core_->SubmitJob(Spec("waiting", 4));
  Exit(a, *done, 1, 0, 0);
  Commit(*running, 1, 7, 1);
  ASSERT_EQ(core_->GetJob(*done)->state(), SUCCEEDED);
  ASSERT_EQ(core_->GetJob(*running)->state(), RUNNING);
  const JobStatus before = *core_->GetJob(*running);
  std::string secret;
  for (const Assignment& x : Drain(a, *core_->OpenAssignmentStream(a))) {
    if (x.job_id() == *running) secret = x.rendezvous_secret();
  }
  ASSERT_FALSE(secret.empty());

  Start(dir);  // a new coordinator on the same state
  EXPECT_EQ(core_->ListJobs({}).size(), 3u);
  EXPECT_EQ(core_->GetJob(*done)->state(), SUCCEEDED);
  EXPECT_EQ(core_->GetJob(*waiting)->state(), PENDING);
  auto st = core_->GetJob(*running);
  ASSERT_EQ(st->state(), RUNNING);
  EXPECT_EQ(st->attempt(), 1);
  EXPECT_EQ(st->placement_size(), 1);
  EXPECT_EQ(st->events_size(), before.events_size() + 1);  // + COORDINATOR_RESTARTED
  EXPECT_EQ(core_->ListCheckpoints(*running)->size(), 1u);
  EXPECT_TRUE(core_->ListCheckpoints(*running)->at(0).committed());
  // The worker id stays valid; ranks started before the restart are not started twice, and
  // they keep using their rendezvous namespace and secret.
  const HeartbeatRequest hb = RankBeat(a, *running, 1, 0, RankStatus::RUNNING);
  ASSERT_TRUE(core_->Heartbeat(hb).ok());
  EXPECT_EQ(core_->GetJob(*running)->state(), RUNNING);
  EXPECT_TRUE(Drain(a, *core_->OpenAssignmentStream(a)).empty());
  RendezvousSetRequest set;
  set.set_namespace_(*running + "/1");
  set.set_secret(secret);
  set.set_key("k");
  EXPECT_TRUE(core_->RendezvousSet(set).ok());
  // A job submitted now does not reuse an id.
  auto next = core_->SubmitJob(Spec("next", 1));
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_NE(*next, *done);
  EXPECT_NE(*next, *waiting);
  EXPECT_NE(*next, *running);
  ASSERT_EQ(core_->ListJobs({}).size(), 4u);
  EXPECT_EQ(core_->ListJobs({}).back().job_id(), *next);  // submission order goes on
  // The worker never heartbeats again: the attempt fails and restarts from step 7 once a
  // worker is back.
  clock_.Advance(absl::Seconds(6));
  core_->Tick();
  st = core_->GetJob(*running);
  EXPECT_EQ(st->state(), PENDING);
  EXPECT_TRUE(HasEvent(*st, "WORKER_LOST"));
  Register("a", 2);
  st = core_->GetJob(*running);
  EXPECT_EQ(st->state(), RUNNING);
  EXPECT_EQ(st->attempt(), 2);
}

TEST_F(CoreTest, RendezvousValuesOfRunningAttemptsSurviveRestartAndEndedOnesAreDeleted) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/core_restart_rendezvous";
  Start(dir);
  const std::string a = Register("a", 2);
  auto running = core_->SubmitJob(Spec("running", 1));
  auto done = core_->SubmitJob(Spec("done", 1));
  std::map<std::string, Assignment> starts;  // by job id
  for (const Assignment& x : Drain(a, *core_->OpenAssignmentStream(a))) starts[x.job_id()] = x;
  ASSERT_EQ(starts.size(), 2u);
  auto set = [&](const std::string& job, const std::string& key, const std::string& value) {
    ASSERT_TRUE(core_->RendezvousSet(RendezvousSetFor(starts[job], key, value)).ok());
  };
  set(*running, "rank_0", "addr-0");
  set(*running, "ft/e1/rank_0", std::string("\0binary\xff", 8));
  set(*running, "rank_0", "addr-0b");  // replaces
  set(*done, "rank_0", "gone");
  Exit(a, *done, 1, 0, 0);  // its namespace closes
  ASSERT_EQ(core_->GetJob(*done)->state(), SUCCEEDED);
  core_.reset();
  {  // A namespace whose delete never reached the disk (the coordinator stopped first).
    auto store = StateStore::Open(dir);
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->ApplyRendezvous({{false, "job-old/3", "k", "v"}}).ok());
  }

  Start(dir);  // a new coordinator on the same state
  RendezvousGetRequest get;
  get.set_namespace_(starts[*running].rendezvous_namespace());
  get.set_secret(starts[*running].rendezvous_secret());
  get.add_keys("rank_0");
  get.add_keys("ft/e1/rank_0");
  auto got = core_->RendezvousGet(get);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->values_size(), 2);
  EXPECT_EQ(got->values(0), "addr-0b");
  EXPECT_EQ(got->values(1), std::string("\0binary\xff", 8));
  get.set_secret("wrong");  // the reloaded namespace keeps its secret
  EXPECT_EQ(core_->RendezvousGet(get).status().code(), absl::StatusCode::kPermissionDenied);
  get.set_namespace_(starts[*done].rendezvous_namespace());
  get.set_secret(starts[*done].rendezvous_secret());
  get.clear_keys();
  get.add_keys("rank_0");
  EXPECT_EQ(core_->RendezvousGet(get).status().code(), absl::StatusCode::kNotFound);
  core_.reset();
  const std::vector<RendezvousRow> rows = StoredRendezvous(dir);
  ASSERT_EQ(rows.size(), 2u);  // the running attempt's; the ended and the stray are deleted
  for (const RendezvousRow& r : rows) EXPECT_EQ(r.ns, starts[*running].rendezvous_namespace());

  // The restarted attempt's worker never comes back: the attempt ends and its values go.
  Start(dir);
  clock_.Advance(absl::Seconds(6));
  core_->Tick();
  EXPECT_EQ(core_->GetJob(*running)->state(), FAILED);
  core_.reset();
  EXPECT_TRUE(StoredRendezvous(dir).empty());
}

TEST_F(CoreTest, RendezvousValuesPastSmallerLimitsAreNotReloaded) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/core_restart_limits";
  Start(dir);
  const std::string a = Register("a", 1);
  auto job = core_->SubmitJob(Spec("j", 1));
  auto starts = Drain(a, *core_->OpenAssignmentStream(a));
  ASSERT_EQ(starts.size(), 1u);
  const RendezvousSetRequest set = RendezvousSetFor(starts[0], "small", "v");
  ASSERT_TRUE(core_->RendezvousSet(set).ok());
  ASSERT_TRUE(
      core_->RendezvousSet(RendezvousSetFor(starts[0], "large", std::string(200, 'x'))).ok());

  Start(dir, [](CoreOptions& o) { o.rendezvous_limits.max_value_bytes = 100; });
  RendezvousGetRequest get;
  get.set_namespace_(set.namespace_());
  get.set_secret(set.secret());
  get.add_keys("small");
  auto got = core_->RendezvousGet(get);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->values(0), "v");
  get.clear_keys();
  get.add_keys("large");
  EXPECT_EQ(core_->RendezvousGet(get).status().code(), absl::StatusCode::kDeadlineExceeded);
}

}  // namespace
}  // namespace shardline::coordinator
