// Replica-group fault tolerance in the trainer: the loop under a gate (abort, leave), and
// ReplicaFaultTolerance over real Gloo communicators on threads with a scripted coordinator
// (a rank fails, its group leaves, the survivors train on alone, a replacement group joins and
// is healed bit for bit).
#include "trainer/replica_fault_tolerance.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "checkpoint/format.h"
#include "common/status_macros.h"
#include "data/batch.h"
#include "data/sampler.h"
#include "data/token_dataset.h"
#include "fsdp/comm_groups.h"
#include "fsdp/replica_state.h"
#include "fsdp/tcp_kv_store.h"
#include "models/model_factory.h"
#include "trainer/checkpoint_startup.h"
#include "trainer/checkpointing.h"
#include "trainer/config.h"
#include "trainer/fsdp_backend.h"
#include "trainer/local_backend.h"
#include "trainer/lr_schedule.h"
#include "trainer/store.h"
#include "trainer/tensorboard_reader.h"
#include "trainer/train_loop.h"

namespace shardline::trainer {
namespace {

constexpr char kSpec[] = "examples/tiny_gpt_shakespeare.yaml";

TrainerConfig Config(int world_size, const std::vector<std::string>& sets) {
  launch::RankEnv env;
  env.world_size = world_size;
  auto c = LoadTrainerConfig(kSpec, sets, env);
  EXPECT_TRUE(c.ok()) << c.status();
  return *c;
}

// ---- the loop under a fake gate (one rank, FSDP backend at W = 1) ---------------------------

class ScriptedGate : public StepGate {
 public:
  explicit ScriptedGate(fsdp::FsdpEngine* engine) : engine_(engine) {}
  void BeginStep(int64_t step) override { begun.push_back(step); }
  absl::Status broken() const override { return absl::OkStatus(); }
  absl::StatusOr<StepDecision> EndStep(int64_t step, const absl::Status& trained, double loss,
                                       bool after_step_follows) override {
    EXPECT_TRUE(trained.ok()) << trained;
    if (after_step_follows) announced.push_back(step);
    StepDecision d;
    d.step = step;
    d.loss = loss;
    if (step == abort_step && !aborted) {
      aborted = true;
      engine_->DropStepGradients();
      d.kind = StepDecision::Kind::kAbort;
    } else if (step == leave_step) {
      left_ = true;
      d.kind = StepDecision::Kind::kLeave;
    }
    return d;
  }
  absl::StatusOr<StepDecision> EndAfterStep(int64_t step) override {
    after_votes.push_back(step);
    StepDecision d;
    d.step = step;
    if (step == abort_after_step && !aborted_after) {
      aborted_after = true;
      d.kind = StepDecision::Kind::kAbort;
    }
    return d;
  }
  absl::Status AfterCommit(int64_t step, int64_t, int64_t) override {
    committed.push_back(step);
    return absl::OkStatus();
  }
  bool MarkBroken(const absl::Status&) override { return false; }
  // With not_leader_until_abort: this rank leads only from abort_step's ABORT on (the lowest
  // live group was lost there).
  bool leader() const override { return !not_leader_until_abort || aborted; }
  bool left() const override { return left_; }

  int64_t abort_step = -1, leave_step = -1, abort_after_step = -1;
  bool aborted = false, aborted_after = false;
  bool not_leader_until_abort = false;
  // Steps whose TRAIN vote announced an after-step vote; the after-step votes cast.
  std::vector<int64_t> announced, after_votes;
  std::vector<int64_t> begun, committed;

 private:
  fsdp::FsdpEngine* engine_;
  bool left_ = false;
};

struct OneRank {
  TrainerConfig config;
  std::unique_ptr<data::TokenDataset> dataset;
  std::unique_ptr<models::LanguageModel> model;
  std::unique_ptr<fsdp::KvStore> store;
  fsdp::CommGroups groups;
  std::unique_ptr<FsdpBackend> backend;
};

std::unique_ptr<OneRank> MakeOneRank(std::vector<std::string> more = {}) {
  auto r = std::make_unique<OneRank>();
  std::vector<std::string> sets = {"fsdp.sharding_strategy=NO_SHARD",
                                   "fsdp.hybrid_shard_degree=0",
                                   "train.sample_tokens=0",
                                   "train.log_every=1000",
                                   "train.steps=4",
                                   "train.eval_every=0",
                                   "train.deterministic=true"};
  sets.insert(sets.end(), more.begin(), more.end());
  r->config = Config(1, sets);
  const TrainerConfig& c = r->config;
  auto ds = data::TokenDataset::Open(
      {c.data_path, c.data_format, c.val_fraction, c.seq_len, c.model.vocab_size});
  EXPECT_TRUE(ds.ok()) << ds.status();
  r->dataset = std::move(*ds);
  auto model = models::CreateModel(c.model);
  EXPECT_TRUE(model.ok()) << model.status();
  r->model = std::move(*model);
  r->store = *CreateBootstrapStore(launch::RankEnv(), absl::Seconds(10));
  auto groups = fsdp::CreateCommGroups(fsdp::ParallelLayout(), 0, r->store.get(), {});
  EXPECT_TRUE(groups.ok()) << groups.status();
  r->groups = std::move(*groups);
  auto b = FsdpBackend::Create(
      *r->model, c, 0, {r->groups.world.get(), r->groups.shard.get(), r->groups.replicate.get()});
  EXPECT_TRUE(b.ok()) << b.status();
  r->backend = std::move(*b);
  return r;
}

// The same rank's training without a gate: what a gated run must equal.
absl::StatusOr<TrainSummary> PlainRun() {
  std::unique_ptr<OneRank> plain = MakeOneRank();
  return RunTraining(plain->config, *plain->model, *plain->backend, *plain->dataset, {});
}

TEST(TrainLoopWithAGate, AnAbortedStepIsTrainedAgainOnTheSameDataAndLossesMatchAPlainRun) {
  absl::StatusOr<TrainSummary> want = PlainRun();
  ASSERT_TRUE(want.ok()) << want.status();

  std::unique_ptr<OneRank> gated = MakeOneRank();
  ScriptedGate gate(gated->backend->engine());
  gate.abort_step = 2;
  TrainLoopOptions o;
  o.gate = &gate;
  auto got = RunTraining(gated->config, *gated->model, *gated->backend, *gated->dataset, o);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(gate.begun, (std::vector<int64_t>{1, 2, 2, 3, 4}));
  EXPECT_EQ(gate.committed, (std::vector<int64_t>{1, 2, 3, 4}));
  EXPECT_EQ(got->train_losses, want->train_losses);  // Bit for bit: the same data, no leftovers.
  EXPECT_EQ(got->cursor, want->cursor);
  // Only the last step has work after its update (the final evaluation).
  EXPECT_EQ(gate.announced, (std::vector<int64_t>{4}));
  EXPECT_EQ(gate.after_votes, (std::vector<int64_t>{4}));
}

TEST(TrainLoopWithAGate, AnAbortedAfterStepVoteDoesTheWorkAgainAndLogsItOnce) {
  absl::StatusOr<TrainSummary> want = PlainRun();
  ASSERT_TRUE(want.ok()) << want.status();

  std::unique_ptr<OneRank> gated = MakeOneRank();
  ScriptedGate gate(gated->backend->engine());
  gate.abort_after_step = 4;
  TrainLoopOptions o;
  o.gate = &gate;
  std::vector<int64_t> saves, logged;
  o.after_step = [&](int64_t done, const data::DataCursor&) {
    saves.push_back(done);
    return absl::OkStatus();
  };
  o.saves_after_step = [](int64_t done) { return done == 2 || done == 4; };
  o.on_log = [&](const StepMetrics& m) { logged.push_back(m.step); };
  auto got = RunTraining(gated->config, *gated->model, *gated->backend, *gated->dataset, o);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(gate.announced, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(gate.after_votes, (std::vector<int64_t>{2, 4, 4}));
  // after_step runs after every step; the save after step 4 twice (its vote aborted once).
  EXPECT_EQ(saves, (std::vector<int64_t>{1, 2, 3, 4, 4}));
  EXPECT_EQ(logged, (std::vector<int64_t>{4}));  // the final line once
  EXPECT_EQ(got->train_losses, want->train_losses);
  ASSERT_EQ(got->val_losses.size(), 1u);
  EXPECT_EQ(got->val_losses, want->val_losses);  // the same committed model evaluated again
  EXPECT_EQ(got->final_val_loss, want->final_val_loss);
  EXPECT_EQ(gate.committed, (std::vector<int64_t>{1, 2, 3, 4}));
}

// The old leader may be lost between a step's commit and its log line (its group's loss is
// found only at the next vote): the rank that leads from then on logs that step again, so the
// job's TensorBoard series has every logged step (a cold suite run missed step 16, #30).
TEST(TrainLoopWithAGate, ANewLeaderLogsTheLastLoggedStepTheOldLeaderMayHaveLost) {
  std::unique_ptr<OneRank> r = MakeOneRank({"train.log_every=1"});
  ScriptedGate gate(r->backend->engine());
  gate.abort_step = 3;
  gate.not_leader_until_abort = true;
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/tb-takeover";
  std::filesystem::remove_all(dir);
  TrainLoopOptions o;
  o.gate = &gate;
  o.tensorboard_dir = dir;
  std::vector<int64_t> logged;
  o.on_log = [&](const StepMetrics& m) { logged.push_back(m.step); };
  auto got = RunTraining(r->config, *r->model, *r->backend, *r->dataset, o);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(logged, (std::vector<int64_t>{1, 2, 3, 4}));  // Its own metrics: each step once.
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) files.push_back(e.path());
  ASSERT_EQ(files.size(), 1u);
  auto events = ReadTensorBoardEvents(files[0]);
  ASSERT_TRUE(events.ok()) << events.status();
  std::vector<int64_t> steps;
  std::vector<float> losses;
  for (const tensorboard::Event& e : *events) {
    if (e.has_summary()) {
      steps.push_back(e.step());
      losses.push_back(e.summary().value(0).simple_value());
    }
  }
  // Step 2, committed while the old leader led, then what this rank led.
  EXPECT_EQ(steps, (std::vector<int64_t>{2, 3, 4}));
  ASSERT_EQ(losses.size(), 3u);
  EXPECT_FLOAT_EQ(losses[0], static_cast<float>(got->train_losses[1]));
}

TEST(TrainLoopWithAGate, LeaveEndsTrainingUnavailableNamingTheStep) {
  std::unique_ptr<OneRank> r = MakeOneRank();
  ScriptedGate gate(r->backend->engine());
  gate.leave_step = 3;
  TrainLoopOptions o;
  o.gate = &gate;
  auto got = RunTraining(r->config, *r->model, *r->backend, *r->dataset, o);
  ASSERT_EQ(got.status().code(), absl::StatusCode::kUnavailable) << got.status();
  EXPECT_EQ(got.status().message(), "left the job at step 3: this rank's replica group was lost");
  EXPECT_TRUE(gate.left());
  EXPECT_EQ(gate.committed, (std::vector<int64_t>{1, 2}));
}

// ---- ReplicaFaultTolerance over Gloo on threads, with a scripted coordinator ---------------

// Rounds of votes: each round waits for its ranks' ballots, then `decide` answers each of them.
class ScriptedCoordinator {
 public:
  struct Round {
    std::vector<int> ranks;
    std::function<std::map<int, StepDecision>(const std::map<int, StepBallot>&)> decide;
  };
  explicit ScriptedCoordinator(std::vector<Round> rounds) : rounds_(std::move(rounds)) {}

  absl::StatusOr<StepDecision> Vote(int rank, const StepBallot& b) {
    std::unique_lock<std::mutex> lock(mu_);
    if (next_ >= rounds_.size()) return absl::InternalError("no round left");
    // The first round still waiting for this rank (a replacement's vote may come early).
    size_t round = next_;
    while (round < rounds_.size() &&
           (std::find(rounds_[round].ranks.begin(), rounds_[round].ranks.end(), rank) ==
                rounds_[round].ranks.end() ||
            ballots_[round].count(rank) > 0)) {
      ++round;
    }
    if (round == rounds_.size()) return absl::InternalError("no round for this vote");
    ballots_[round][rank] = b;
    while (next_ < rounds_.size() && ballots_[next_].size() == rounds_[next_].ranks.size()) {
      seen.push_back(ballots_[next_]);
      decisions_[next_] = rounds_[next_].decide(ballots_[next_]);
      ++next_;
      cv_.notify_all();
    }
    if (!cv_.wait_for(lock, std::chrono::seconds(60), [&] { return decisions_.count(round); })) {
      return absl::DeadlineExceededError("no decision");
    }
    return decisions_[round].at(rank);
  }

  std::vector<std::map<int, StepBallot>> seen;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Round> rounds_;
  size_t next_ = 0;
  std::map<size_t, std::map<int, StepBallot>> ballots_;
  std::map<size_t, std::map<int, StepDecision>> decisions_;
};

class RankVoter : public StepVoter {
 public:
  RankVoter(ScriptedCoordinator* c, int rank) : c_(c), rank_(rank) {}
  absl::StatusOr<StepDecision> Vote(const StepBallot& b) override { return c_->Vote(rank_, b); }

 private:
  ScriptedCoordinator* c_;
  int rank_;
};

StepDecision Decide(StepDecision::Kind kind, int64_t step, int64_t epoch, std::vector<int> live,
                    std::vector<int> joining = {}) {
  StepDecision d;
  d.kind = kind;
  d.step = step;
  d.epoch = epoch;
  d.live_groups = std::move(live);
  d.joining_groups = std::move(joining);
  d.heal_source_group = 0;
  return d;
}

// A round's answer: COMMIT of `step` in `epoch` with the groups `live`, to every ballot.
std::function<std::map<int, StepDecision>(const std::map<int, StepBallot>&)> CommitAll(
    int64_t step, int64_t epoch, std::vector<int> live) {
  return [step, epoch, live](const std::map<int, StepBallot>& b) {
    std::map<int, StepDecision> d;
    for (const auto& [r, ballot] : b) d[r] = Decide(StepDecision::Kind::kCommit, step, epoch, live);
    return d;
  };
}

struct FtRank {
  std::unique_ptr<models::LanguageModel> model;
  std::unique_ptr<FsdpBackend> backend;
  std::unique_ptr<TrainerCheckpointing> checkpointing;  // Only with a policy.
  std::unique_ptr<ReplicaFaultTolerance> ft;
};

// With `policy`, the rank saves checkpoints as the trainer does (the world communicator it
// starts with; ReplicaFaultTolerance moves later saves to each membership's).
absl::StatusOr<FtRank> MakeFtRank(const TrainerConfig& c, int rank, fsdp::KvStore* store,
                                  StepVoter* voter, bool joining,
                                  const CheckpointPolicy* policy = nullptr) {
  FtRank r;
  auto model = models::CreateModel(c.model);
  if (!model.ok()) return model.status();
  r.model = std::move(*model);
  ReplicaFaultToleranceOptions o;
  o.layout = c.layout;
  o.rank = rank;
  o.comm.timeout = absl::Seconds(30);
  o.comm.key_prefix = "comm/job-1/1";
  o.store = store;
  o.voter = voter;
  fsdp::CommGroups groups;
  if (joining) {
    groups = ReplicaFaultTolerance::PlaceholderGroups(c.layout, rank, at::kCPU);
  } else {
    auto g = fsdp::CreateCommGroups(c.layout, rank, store, o.comm);
    if (!g.ok()) return g.status();
    groups = std::move(*g);
  }
  auto b = FsdpBackend::Create(*r.model, c, rank,
                               {groups.world.get(), groups.shard.get(), groups.replicate.get()});
  if (!b.ok()) return b.status();
  r.backend = std::move(*b);
  if (policy != nullptr) {
    auto ckpt = TrainerCheckpointing::Create(*policy, r.backend->engine(), r.backend->optimizer(),
                                             groups.world.get());
    if (!ckpt.ok()) return ckpt.status();
    r.checkpointing = std::move(*ckpt);
  }
  auto ft = ReplicaFaultTolerance::Create(o, r.backend.get(), r.checkpointing.get(),
                                          std::move(groups), joining);
  if (!ft.ok()) return ft.status();
  r.ft = std::move(*ft);
  return r;
}

// A committed step's update from gradients that depend on the shard and the step only (so the
// replicas of a shard stay equal).
absl::Status Update(FtRank& r, int64_t step, int shard_index) {
  for (const auto& flat : r.backend->engine()->flat_params()) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(1000 * step + shard_index);
    flat->shard_grad().copy_(at::randn(flat->shard_grad().sizes(), gen));
  }
  return r.backend->Step(1e-2).status();
}

TEST(ReplicaFaultTolerance, LostGroupLeavesSurvivorsTrainOnAndAReplacementIsHealedBitForBit) {
  const TrainerConfig c = Config(4, {"train.sample_tokens=0"});  // HYBRID_SHARD, S = 2.
  fsdp::TcpKvStore::Options so;
  so.serve = true;
  auto store = fsdp::TcpKvStore::Create(so);
  ASSERT_TRUE(store.ok()) << store.status();
  using K = StepDecision::Kind;
  ScriptedCoordinator coordinator(
      {// Step 1: everyone ok.
       {{0, 1, 2, 3}, CommitAll(1, 0, {0, 1})},
       // Step 2: rank 2 failed; group 1 is lost.
       {{0, 1, 2, 3},
        [](const std::map<int, StepBallot>&) {
          std::map<int, StepDecision> d;
          for (int r : {0, 1}) d[r] = Decide(K::kAbort, 2, 1, {0});
          for (int r : {2, 3}) d[r] = Decide(K::kLeave, 2, 1, {0});
          return d;
        }},
       // Step 2 again, group 0 alone.
       {{0, 1}, CommitAll(2, 1, {0})},
       // Step 3: group 1's replacement is admitted and healed from group 0.
       {{0, 1, 2, 3}, [](const std::map<int, StepBallot>&) {
          std::map<int, StepDecision> d;
          for (int r : {0, 1, 2, 3}) d[r] = Decide(K::kCommit, 3, 2, {0, 1}, {1});
          return d;
        }}});
  std::vector<uint64_t> digest(4);
  std::vector<int64_t> opt_steps(4), epochs(4);
  std::vector<JoinPoint> joined(4);
  std::vector<bool> left(4), leader(4);
  std::vector<absl::Status> status(4);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 4; ++rank) {
    threads.emplace_back([&, rank] {
      status[rank] = [&]() -> absl::Status {
        RankVoter voter(&coordinator, rank);
        const int shard_index = c.layout.ShardIndex(rank);
        absl::StatusOr<FtRank> r = MakeFtRank(c, rank, store->get(), &voter, false);
        if (!r.ok()) return r.status();
        r->ft->BeginStep(1);
        ASSIGN_OR_RETURN(StepDecision d, r->ft->EndStep(1, absl::OkStatus(), 2.5, false));
        if (d.kind != K::kCommit) return absl::InternalError("step 1 not committed");
        RETURN_IF_ERROR(Update(*r, 1, shard_index));
        RETURN_IF_ERROR(r->ft->AfterCommit(1, 0, 32));
        r->ft->BeginStep(2);
        const absl::Status failure =
            rank == 2 ? absl::UnavailableError("group shard[1] op all_gather step 2: lost a peer")
                      : absl::OkStatus();
        ASSIGN_OR_RETURN(d, r->ft->EndStep(2, failure, 2.4, false));
        if (rank >= 2) {
          left[rank] = r->ft->left();
          if (d.kind != K::kLeave) return absl::InternalError("group 1 did not leave");
          r = absl::StatusOr<FtRank>();  // The lost process ends...
          RankVoter replacement_voter(&coordinator, rank);
          // ...and its replacement joins.
          absl::StatusOr<FtRank> fresh =
              MakeFtRank(c, rank, store->get(), &replacement_voter, /*joining=*/true);
          if (!fresh.ok()) return fresh.status();
          ASSIGN_OR_RETURN(joined[rank], fresh->ft->Join());
          ASSIGN_OR_RETURN(digest[rank], fsdp::StateDigest(*fresh->backend->engine(),
                                                           fresh->backend->optimizer()));
          opt_steps[rank] = fresh->backend->optimizer()->step_count();
          epochs[rank] = fresh->ft->epoch();
          leader[rank] = fresh->ft->leader();
          return absl::OkStatus();
        }
        if (d.kind != K::kAbort) return absl::InternalError("step 2 not aborted");
        if (r->ft->live_groups() != std::vector<int>{0}) return absl::InternalError("live");
        r->ft->BeginStep(2);
        ASSIGN_OR_RETURN(d, r->ft->EndStep(2, absl::OkStatus(), 2.4, false));
        if (d.kind != K::kCommit) return absl::InternalError("step 2 not committed");
        RETURN_IF_ERROR(Update(*r, 2, shard_index));
        RETURN_IF_ERROR(r->ft->AfterCommit(2, 0, 64));
        r->ft->BeginStep(3);
        ASSIGN_OR_RETURN(d, r->ft->EndStep(3, absl::OkStatus(), 2.3, false));
        if (d.kind != K::kCommit) return absl::InternalError("step 3 not committed");
        RETURN_IF_ERROR(Update(*r, 3, shard_index));
        RETURN_IF_ERROR(r->ft->AfterCommit(3, 0, 96));  // New epoch: build and heal.
        ASSIGN_OR_RETURN(digest[rank],
                         fsdp::StateDigest(*r->backend->engine(), r->backend->optimizer()));
        opt_steps[rank] = r->backend->optimizer()->step_count();
        epochs[rank] = r->ft->epoch();
        leader[rank] = r->ft->leader();
        return absl::OkStatus();
      }();
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < 4; ++r) ASSERT_TRUE(status[r].ok()) << "rank " << r << ": " << status[r];
  // Rank 2's vote on step 2 said why.
  ASSERT_EQ(coordinator.seen.size(), 4u);
  EXPECT_FALSE(coordinator.seen[1].at(2).ok);
  EXPECT_EQ(coordinator.seen[1].at(2).error, "group shard[1] op all_gather step 2: lost a peer");
  EXPECT_TRUE(coordinator.seen[1].at(3).ok);
  EXPECT_TRUE(coordinator.seen[3].at(2).joining);
  EXPECT_TRUE(left[2] && left[3]);
  for (int r : {2, 3}) {
    EXPECT_EQ(joined[r].steps_done, 3) << "rank " << r;
    EXPECT_EQ(joined[r].data_epoch, 0);
    EXPECT_EQ(joined[r].data_position, 96);
  }
  EXPECT_EQ(digest[0], digest[2]);
  EXPECT_EQ(digest[1], digest[3]);
  EXPECT_NE(digest[0], digest[1]);
  EXPECT_EQ(opt_steps, (std::vector<int64_t>{3, 3, 3, 3}));
  EXPECT_EQ(epochs, (std::vector<int64_t>{2, 2, 2, 2}));
  EXPECT_EQ(leader, (std::vector<bool>{true, false, false, false}));
}

// A rank dies right after the last step's COMMIT: its group's other rank fails in its update
// (the grad-norm all-reduce of its shard group) and exits, the other group's evaluation fails,
// it votes not ok on the work after the step and evaluates again over its own communicators
// (before the after-step vote, it skipped the final evaluation and save).
class DyingAfterCommitVoter : public StepVoter {
 public:
  DyingAfterCommitVoter(ScriptedCoordinator* c, int rank, int64_t step)
      : c_(c), rank_(rank), step_(step) {}
  void set_gate(ReplicaFaultTolerance* ft) { ft_ = ft; }
  absl::StatusOr<StepDecision> Vote(const StepBallot& b) override {
    absl::StatusOr<StepDecision> d = c_->Vote(rank_, b);
    if (d.ok() && b.step == step_ && b.phase == StepBallot::Phase::kTrain) {
      // What its peers see of a killed process: its sockets close (Abandon).
      ft_->MarkBroken(absl::UnavailableError("rank killed after the update"));
    }
    return d;
  }

 private:
  ScriptedCoordinator* c_;
  int rank_;
  int64_t step_;
  ReplicaFaultTolerance* ft_ = nullptr;
};

TEST(ReplicaFaultTolerance, AFailureInTheFinalEvaluationIsDoneAgainByTheLiveGroups) {
  constexpr int kWorld = 4;
  const TrainerConfig c =
      Config(kWorld, {"train.sample_tokens=0", "train.steps=2", "train.eval_every=0",
                      "train.eval_batches=2", "train.log_every=1"});
  fsdp::TcpKvStore::Options so;
  so.serve = true;
  auto store = fsdp::TcpKvStore::Create(so);
  ASSERT_TRUE(store.ok()) << store.status();
  using K = StepDecision::Kind;
  ScriptedCoordinator coordinator(
      {{{0, 1, 2, 3}, CommitAll(1, 0, {0, 1})},
       {{0, 1, 2, 3}, CommitAll(2, 0, {0, 1})},
       // The work after step 2: ranks 2 and 3 are gone (their exits lose group 1).
       {{0, 1},
        [](const std::map<int, StepBallot>&) {
          std::map<int, StepDecision> d;
          for (int r : {0, 1}) d[r] = Decide(K::kAbort, 2, 1, {0});
          return d;
        }},
       {{0, 1}, CommitAll(2, 1, {0})}});
  std::vector<absl::Status> status(kWorld);
  std::vector<absl::StatusOr<TrainSummary>> summaries(kWorld);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < kWorld; ++rank) {
    threads.emplace_back([&, rank] {
      status[rank] = [&]() -> absl::Status {
        DyingAfterCommitVoter voter(&coordinator, rank, rank == 2 ? 2 : -1);
        ASSIGN_OR_RETURN(FtRank r, MakeFtRank(c, rank, store->get(), &voter, false));
        voter.set_gate(r.ft.get());
        ASSIGN_OR_RETURN(auto ds,
                         data::TokenDataset::Open({c.data_path, c.data_format, c.val_fraction,
                                                   c.seq_len, c.model.vocab_size}));
        TrainLoopOptions o;
        o.rank = rank;
        o.world_size = kWorld;
        o.gate = r.ft.get();
        summaries[rank] = RunTraining(c, *r.model, *r.backend, *ds, o);
        return absl::OkStatus();
      }();
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < kWorld; ++r) ASSERT_TRUE(status[r].ok()) << "rank " << r << ": " << status[r];
  ASSERT_EQ(coordinator.seen.size(), 4u);
  // Step 1 has no work after it; step 2 (the last) has the final evaluation.
  EXPECT_FALSE(coordinator.seen[0].at(0).after_step_follows);
  EXPECT_TRUE(coordinator.seen[1].at(0).after_step_follows);
  for (int r : {0, 1}) {
    const StepBallot& b = coordinator.seen[2].at(r);
    EXPECT_EQ(b.phase, StepBallot::Phase::kAfterStep) << "rank " << r;
    EXPECT_EQ(b.step, 2);
    EXPECT_FALSE(b.ok) << "rank " << r << " (its evaluation needed ranks 2 and 3)";
  }
  for (int r : {0, 1}) EXPECT_TRUE(coordinator.seen[3].at(r).ok);
  EXPECT_EQ(summaries[2].status().code(), absl::StatusCode::kInternal) << summaries[2].status();
  EXPECT_EQ(summaries[3].status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(summaries[3].status().message().find("group shard[1] op all_reduce step 2"),
            std::string::npos)
      << summaries[3].status();
  for (int r : {0, 1}) {
    ASSERT_TRUE(summaries[r].ok()) << "rank " << r << ": " << summaries[r].status();
    ASSERT_EQ(summaries[r]->val_losses.size(), 1u) << "rank " << r;
    EXPECT_EQ(summaries[r]->val_losses[0].first, 2);
    ASSERT_TRUE(summaries[r]->final_val_loss.has_value());
    EXPECT_TRUE(std::isfinite(*summaries[r]->final_val_loss));
  }
  EXPECT_EQ(summaries[0]->final_val_loss, summaries[1]->final_val_loss);
}

// checkpoint.async_save with a lost writer group. W = 4 HYBRID_SHARD (S = 2), a save every 2
// steps, asynchronous: group 0 (ranks 0 and 1) writes the save of step 2 in the background, then
// the coordinator loses group 0 at the vote on step 3. Group 1 cannot know whether that save
// committed (a writer killed in the middle of its background write leaves it uncommitted), so
// it saves step 3, which is not a save step, synchronously, with a vote on that work, and commits
// it as the writer group.
TEST(ReplicaFaultTolerance, LosingTheWriterOfAnAsynchronousSaveSavesTheRetriedStepSynchronously) {
  constexpr int kWorld = 4;
  const TrainerConfig c = Config(kWorld, {"train.sample_tokens=0", "train.steps=4",
                                          "train.eval_every=0", "train.eval_batches=1"});
  fsdp::TcpKvStore::Options so;
  so.serve = true;
  auto store = fsdp::TcpKvStore::Create(so);
  ASSERT_TRUE(store.ok()) << store.status();
  const std::string dir = ::testing::TempDir() + "/async_writer_lost";
  std::filesystem::remove_all(dir);
  CheckpointPolicy policy;
  policy.dir = dir;
  policy.every_steps = 2;
  policy.async_save = true;
  policy.total_steps = 4;
  policy.optimizer_kind = "adamw";
  policy.job_id = "job-1";
  policy.attempt = 1;
  policy.resume_step = 0;
  policy.commit_timeout = absl::Seconds(30);
  using K = StepDecision::Kind;
  ScriptedCoordinator coordinator(
      {{{0, 1, 2, 3}, CommitAll(1, 0, {0, 1})},
       {{0, 1, 2, 3}, CommitAll(2, 0, {0, 1})},  // Step 2's training,
       {{0, 1, 2, 3}, CommitAll(2, 0, {0, 1})},  // then its save (asynchronous, by group 0).
       {{0, 1, 2, 3},
        [](const std::map<int, StepBallot>&) {
          std::map<int, StepDecision> d;
          for (int r : {0, 1}) d[r] = Decide(K::kLeave, 3, 1, {1});
          for (int r : {2, 3}) d[r] = Decide(K::kAbort, 3, 1, {1});
          return d;
        }},
       {{2, 3}, CommitAll(3, 1, {1})},
       {{2, 3}, CommitAll(3, 1, {1})},
       {{2, 3}, CommitAll(4, 1, {1})},
       {{2, 3}, CommitAll(4, 1, {1})}});
  std::vector<absl::Status> status(kWorld);
  std::vector<absl::StatusOr<TrainSummary>> summaries(kWorld);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < kWorld; ++rank) {
    threads.emplace_back([&, rank] {
      status[rank] = [&]() -> absl::Status {
        RankVoter voter(&coordinator, rank);
        ASSIGN_OR_RETURN(FtRank r, MakeFtRank(c, rank, store->get(), &voter, false, &policy));
        ASSIGN_OR_RETURN(auto ds,
                         data::TokenDataset::Open({c.data_path, c.data_format, c.val_fraction,
                                                   c.seq_len, c.model.vocab_size}));
        TrainLoopOptions o;
        o.rank = rank;
        o.world_size = kWorld;
        o.gate = r.ft.get();
        RETURN_IF_ERROR(RestoreCheckpoint(r.checkpointing.get(), o, /*joining=*/false));
        summaries[rank] = RunTraining(c, *r.model, *r.backend, *ds, o);
        if (summaries[rank].ok()) return r.checkpointing->Finish();
        return absl::OkStatus();
      }();
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < kWorld; ++r) ASSERT_TRUE(status[r].ok()) << "rank " << r << ": " << status[r];
  for (int r : {0, 1}) {
    EXPECT_EQ(summaries[r].status().code(), absl::StatusCode::kUnavailable)
        << summaries[r].status();
  }
  for (int r : {2, 3})
    ASSERT_TRUE(summaries[r].ok()) << "rank " << r << ": " << summaries[r].status();
  ASSERT_EQ(coordinator.seen.size(), 8u);
  for (int r : {2, 3}) {
    // Step 3 had no work after it when it was first trained; after the ABORT it has the save.
    EXPECT_FALSE(coordinator.seen[3].at(r).after_step_follows) << "rank " << r;
    EXPECT_TRUE(coordinator.seen[4].at(r).after_step_follows) << "rank " << r;
    EXPECT_EQ(coordinator.seen[5].at(r).phase, StepBallot::Phase::kAfterStep) << "rank " << r;
    EXPECT_EQ(coordinator.seen[5].at(r).step, 3) << "rank " << r;
    EXPECT_TRUE(coordinator.seen[5].at(r).ok) << "rank " << r;
  }
  absl::StatusOr<std::vector<int64_t>> steps = checkpoint::ListCommittedSteps(dir);
  ASSERT_TRUE(steps.ok()) << steps.status();
  // Step 2's save completes here (threads are not killed); step 3's is the extra one.
  EXPECT_EQ(*steps, (std::vector<int64_t>{2, 3, 4}));
}

// The numerics of the steps with fewer replicas, against an explicit reference. W = 4
// HYBRID_SHARD (S = 2, groups {0, 1} and {2, 3}), two micro-batches per rank, real training
// (RunTraining under ReplicaFaultTolerance over Gloo threads, fused sharded AdamW, clipping): steps
// 1-2 commit with both groups; step 3 is trained by both, then the coordinator loses group 1
// (ABORT to group 0, LEAVE to group 1); group 0 trains step 3 again (same data: its samplers
// rewind) and steps 3-5 alone. The reference is one process with LibTorch's AdamW
// (LocalBackend): each step's gradient is the mean over the LIVE ranks of their micro-batches'
// mean gradient, exactly what averaging over the live replicas means; the losses are the mean
// over the live ranks. Every committed loss matches it within float tolerance (the sums run in
// other orders; fused and op-by-op AdamW differ in rounding only).
TEST(ReplicaFaultTolerance, StepsWithALostGroupMatchAnExplicitReferenceOverTheLiveRanks) {
  constexpr int kSteps = 5, kLostAt = 3, kWorld = 4;
  const TrainerConfig c =
      Config(kWorld, {"train.sample_tokens=0", "train.steps=5", "train.eval_every=0",
                      "train.eval_batches=1", "train.log_every=1", "train.global_batch_size=16",
                      "train.micro_batch_size=2", "optimizer.warmup_steps=2"});
  ASSERT_EQ(c.accumulation_steps, 2);
  fsdp::TcpKvStore::Options so;
  so.serve = true;
  auto store = fsdp::TcpKvStore::Create(so);
  ASSERT_TRUE(store.ok()) << store.status();

  using K = StepDecision::Kind;
  std::mutex loss_mu;
  std::map<int64_t, double> committed_loss;  // step -> the decided (mean) loss
  auto commit_all = [&](int64_t step, int64_t epoch, std::vector<int> live) {
    return [&, step, epoch, live](const std::map<int, StepBallot>& b) {
      double sum = 0;
      for (auto& [r, ballot] : b) sum += ballot.loss;
      {
        std::lock_guard<std::mutex> lock(loss_mu);
        committed_loss[step] = sum / b.size();
      }
      std::map<int, StepDecision> d;
      for (auto& [r, ballot] : b) {
        d[r] = Decide(K::kCommit, step, epoch, live);
        d[r].loss = sum / b.size();
      }
      return d;
    };
  };
  std::vector<ScriptedCoordinator::Round> rounds = {
      {{0, 1, 2, 3}, commit_all(1, 0, {0, 1})},
      {{0, 1, 2, 3}, commit_all(2, 0, {0, 1})},
      // Step 3: everyone trained it (ok), but group 1 is lost (a stall, say): ABORT / LEAVE.
      {{0, 1, 2, 3},
       [](const std::map<int, StepBallot>& b) {
         std::map<int, StepDecision> d;
         for (int r : {0, 1}) d[r] = Decide(K::kAbort, kLostAt, 1, {0});
         for (int r : {2, 3}) d[r] = Decide(K::kLeave, kLostAt, 1, {0});
         return d;
       }},
      {{0, 1}, commit_all(3, 1, {0})},
      {{0, 1}, commit_all(4, 1, {0})},
      {{0, 1}, commit_all(5, 1, {0})},
      // The final evaluation after step 5.
      {{0, 1}, [](const std::map<int, StepBallot>& b) {
         std::map<int, StepDecision> d;
         for (auto& [r, ballot] : b) d[r] = Decide(K::kCommit, kSteps, 1, {0});
         return d;
       }}};
  ScriptedCoordinator coordinator(std::move(rounds));

  std::vector<absl::Status> status(kWorld);
  std::vector<std::vector<double>> losses(kWorld);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < kWorld; ++rank) {
    threads.emplace_back([&, rank] {
      status[rank] = [&]() -> absl::Status {
        RankVoter voter(&coordinator, rank);
        ASSIGN_OR_RETURN(FtRank r, MakeFtRank(c, rank, store->get(), &voter, false));
        ASSIGN_OR_RETURN(auto ds,
                         data::TokenDataset::Open({c.data_path, c.data_format, c.val_fraction,
                                                   c.seq_len, c.model.vocab_size}));
        TrainLoopOptions o;
        o.rank = rank;
        o.world_size = kWorld;
        o.gate = r.ft.get();
        absl::StatusOr<TrainSummary> summary = RunTraining(c, *r.model, *r.backend, *ds, o);
        if (rank >= 2) {
          if (summary.ok() || !r.ft->left()) return absl::InternalError("group 1 did not leave");
          return absl::OkStatus();
        }
        if (!summary.ok()) return summary.status();
        losses[rank] = summary->train_losses;
        return absl::OkStatus();
      }();
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < kWorld; ++r) ASSERT_TRUE(status[r].ok()) << "rank " << r << ": " << status[r];
  ASSERT_EQ(committed_loss.size(), static_cast<size_t>(kSteps));
  EXPECT_EQ(losses[0], losses[1]);
  ASSERT_EQ(losses[0].size(), static_cast<size_t>(kSteps));

  // The reference: one process, the live ranks' micro-batches, LibTorch AdamW.
  auto ds = data::TokenDataset::Open(
      {c.data_path, c.data_format, c.val_fraction, c.seq_len, c.model.vocab_size});
  ASSERT_TRUE(ds.ok()) << ds.status();
  auto model = models::CreateModel(c.model);
  ASSERT_TRUE(model.ok()) << model.status();
  TrainerConfig one_process = c;  // The same optimizer fields, in one process.
  one_process.layout = fsdp::ParallelLayout();
  auto local = LocalBackend::Create((*model)->module(), one_process);
  ASSERT_TRUE(local.ok()) << local.status();
  std::vector<data::DistributedSampler> samplers;
  for (int rank = 0; rank < kWorld; ++rank) {
    auto sampler = data::DistributedSampler::Create({(*ds)->num_samples(data::Split::kTrain),
                                                     c.global_batch_size, c.micro_batch_size,
                                                     kWorld, rank, c.shuffle_seed});
    ASSERT_TRUE(sampler.ok()) << sampler.status();
    samplers.push_back(std::move(*sampler));
  }
  (*model)->module().train();
  for (int step = 1; step <= kSteps; ++step) {
    const std::vector<int> live =
        step < kLostAt ? std::vector<int>{0, 1, 2, 3} : std::vector<int>{0, 1};
    std::vector<std::vector<std::vector<int64_t>>> micro(kWorld);
    for (int rank = 0; rank < kWorld; ++rank) micro[rank] = samplers[rank].Next();
    double loss_sum = 0;
    const double a = c.accumulation_steps;
    for (size_t i = 0; i < live.size(); ++i) {
      for (size_t m = 0; m < micro[live[i]].size(); ++m) {
        auto batch = data::ReadBatch(**ds, data::Split::kTrain, micro[live[i]][m]);
        ASSERT_TRUE(batch.ok()) << batch.status();
        at::Tensor logits = (*model)->Forward(batch->inputs).to(at::kFloat);
        at::Tensor loss = at::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}),
                                                 batch->targets.reshape({-1}));
        const bool last = i + 1 == live.size() && m + 1 == micro[live[i]].size();
        ASSERT_TRUE((*local)->Backward(loss / (a * live.size()), last).ok());
        loss_sum += loss.item<double>() / a;
      }
    }
    const double lr = LearningRateAt(step - 1, c.lr, c.min_lr, c.warmup_steps, c.steps);
    ASSERT_TRUE((*local)->Step(lr).ok());
    const double want = loss_sum / live.size();
    EXPECT_NEAR(committed_loss.at(step), want, 2e-5 * want) << "step " << step;
    EXPECT_NEAR(losses[0][step - 1], want, 2e-5 * want) << "step " << step;
  }
}

}  // namespace
}  // namespace shardline::trainer
