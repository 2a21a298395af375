// The real coordinator binary over real gRPC on loopback: registration, scheduling and the
// assignment stream, heartbeat loss, restart from a checkpoint, SIGKILL + restart with state
// intact, credentials, spec validation, the listen-address rule, and rendezvous as a KvStore.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"

#include "client/client.h"
#include "coordinator/testing/coordinator_process.h"
#include "coordinator/testing/http_get.h"
#include "coordinator/testing/test_jobs.h"
#include "fsdp/layout.h"
#include "gtest/gtest.h"
#include "proto/coordinator.grpc.pb.h"
#include "trainer/rendezvous_kv_store.h"

namespace shardline::coordinator {
namespace {

constexpr char kUserToken[] = "user-secret-token";
constexpr char kWorkerToken[] = "worker-join-token";

// Heartbeats for one worker from a thread, with the rank statuses the test sets.
class Heartbeater {
 public:
  Heartbeater(client::CoordinatorClient* client, std::string worker_id,
              std::vector<RankStatus> ranks = {})
      : client_(client),
        worker_id_(std::move(worker_id)),
        ranks_(std::move(ranks)),
        thread_([this] { Run(); }) {}
  ~Heartbeater() { Stop(); }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  void SetRanks(std::vector<RankStatus> ranks) {
    absl::MutexLock lock(&mu_);
    ranks_ = std::move(ranks);
  }

 private:
  void Run() {
    while (!stop_) {
      HeartbeatRequest hb;
      hb.set_worker_id(worker_id_);
      {
        absl::MutexLock lock(&mu_);
        for (const RankStatus& r : ranks_) *hb.add_ranks() = r;
      }
      (void)client_->Heartbeat(hb);
      absl::SleepFor(absl::Milliseconds(100));
    }
  }
  client::CoordinatorClient* client_;
  const std::string worker_id_;
  std::atomic<bool> stop_{false};
  absl::Mutex mu_;
  std::vector<RankStatus> ranks_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

// The value text of the sample `name` in a Prometheus exposition whose labels are exactly
// `labels` (`key="value"` each, in any order: the format does not fix it), or nullopt. Label
// values here hold no commas or braces.
std::optional<std::string> Sample(const std::string& text, const std::string& name,
                                  const std::set<std::string>& labels) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::StartsWith(line, name)) continue;
    line.remove_prefix(name.size());
    std::set<std::string> have;
    if (absl::StartsWith(line, "{")) {
      const size_t close = line.find('}');
      if (close == absl::string_view::npos) continue;
      for (absl::string_view l :
           absl::StrSplit(line.substr(1, close - 1), ',', absl::SkipEmpty())) {
        have.insert(std::string(l));
      }
      line.remove_prefix(close + 1);
    }
    if (!absl::StartsWith(line, " ") || have != labels) continue;
    return std::string(line.substr(1));
  }
  return std::nullopt;
}

RankStatus Exited(const std::string& job, int attempt, int rank, int code) {
  RankStatus r;
  r.set_job_id(job);
  r.set_attempt(attempt);
  r.set_rank(rank);
  r.set_state(RankStatus::EXITED);
  r.set_exit_code(code);
  r.set_log_tail(code == 0 ? "" : "Traceback...\nRuntimeError: injected failure\n");
  return r;
}

// Collects assignments of one worker from a background stream.
class AssignmentCollector {
 public:
  AssignmentCollector(client::CoordinatorClient* client, std::string worker_id)
      : thread_([this, client, worker_id] {
          status_ = client->StreamAssignments(worker_id, [this](const Assignment& a) {
            absl::MutexLock lock(&mu_);
            got_.push_back(a);
            return true;
          });
        }) {}
  ~AssignmentCollector() { thread_.join(); }
  // Waits until `n` assignments arrived; returns them all.
  std::vector<Assignment> WaitFor(size_t n, absl::Duration timeout = absl::Seconds(20)) {
    absl::MutexLock lock(&mu_);
    auto enough = [&]() { return got_.size() >= n; };
    mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
    return got_;
  }

 private:
  absl::Mutex mu_;
  std::vector<Assignment> got_ ABSL_GUARDED_BY(mu_);
  absl::Status status_;
  std::thread thread_;
};

// Unary calls made with the async client, so that one test thread holds hundreds open: each is
// started with Start(stub method) and finished through the shared completion queue.
template <typename Response>
class AsyncCalls {
 public:
  struct Call {
    grpc::ClientContext ctx;
    Response resp;
    grpc::Status status;
    std::unique_ptr<grpc::ClientAsyncResponseReader<Response>> reader;
  };
  ~AsyncCalls() {
    cq_.Shutdown();
    void* tag;
    bool ok;
    while (cq_.Next(&tag, &ok)) {
    }
  }
  // `start(ctx, cq)` issues the call (a stub's Async method); the bearer token and a 30 s
  // deadline are set on its context first.
  template <typename StartFn>
  void Start(const std::string& bearer, StartFn start) {
    auto c = std::make_unique<Call>();
    c->ctx.AddMetadata("authorization", "Bearer " + bearer);
    c->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    c->reader = start(&c->ctx, &cq_);
    c->reader->Finish(&c->resp, &c->status, c.get());
    calls_.push_back(std::move(c));
  }
  // Waits for every started call, passing each finished one to `check`; returns how many ended.
  int FinishAll(const std::function<void(const Call&)>& check) {
    int done = 0;
    void* tag;
    bool ok;
    while (done < static_cast<int>(calls_.size()) && cq_.Next(&tag, &ok)) {
      check(*static_cast<Call*>(tag));
      ++done;
    }
    return done;
  }

 private:
  grpc::CompletionQueue cq_;
  std::vector<std::unique_ptr<Call>> calls_;
};

class CoordinatorIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    state_dir_ = TestTmpPath(::testing::UnitTest::GetInstance()->current_test_info()->name());
    StartCoordinator();
  }
  void TearDown() override {
    user_.reset();
    worker_.reset();
    proc_.reset();
  }
  void StartCoordinator() {
    CoordinatorProcess::Options o;
    o.binary = CoordinatorBinaryPath();
    o.args = {"--listen=127.0.0.1:0",
              absl::StrCat("--state_dir=", state_dir_),
              "--heartbeat_interval_ms=100",
              "--heartbeat_timeout_ms=1500",
              "--tick_ms=50",
              absl::StrCat("--token=", kUserToken),
              absl::StrCat("--worker_token=", kWorkerToken),
              "--stop_grace_s=1",
              "--metrics_listen=127.0.0.1:0"};
    auto p = CoordinatorProcess::Start(o);
    ASSERT_TRUE(p.ok()) << p.status();
    proc_ = std::move(*p);
    user_ = *client::CoordinatorClient::Create(proc_->address(), kUserToken);
    worker_ = *client::CoordinatorClient::Create(proc_->address(), kWorkerToken);
    ASSERT_TRUE(user_->WaitForReady(absl::Seconds(10)).ok());
  }
  // Polls GetJob until `pred` holds or 20 s pass.
  JobStatus WaitJob(const std::string& id, const std::function<bool(const JobStatus&)>& pred) {
    JobStatus last;
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (absl::Now() < deadline) {
      auto st = user_->GetJob(id);
      if (st.ok()) {
        last = *st;
        if (pred(last)) return last;
      }
      absl::SleepFor(absl::Milliseconds(50));
    }
    ADD_FAILURE() << "job " << id << " never reached the expected state; last:\n"
                  << last.DebugString();
    return last;
  }
  static bool HasEvent(const JobStatus& st, const std::string& kind) {
    for (const JobEvent& e : st.events()) {
      if (e.kind() == kind) return true;
    }
    return false;
  }
  // Reports a committed checkpoint as the attempt's trainer would: with its credential.
  void CommitCheckpoint(const std::string& job, int attempt, int64_t step,
                        const std::string& attempt_credential) {
    CheckpointReport r;
    r.set_job_id(job);
    r.set_attempt(attempt);
    r.set_rank(0);
    r.set_step(step);
    r.set_path(absl::StrCat("/ckpt/", job, "/step_", step));
    r.add_files("shard_00000.bin");
    r.add_files("MANIFEST.json");
    r.set_expected_files(1);
    r.set_manifest_committed(true);
    const absl::Status s = worker_->ReportCheckpoint(r, attempt_credential);
    ASSERT_TRUE(s.ok()) << s;
  }

  std::string state_dir_;
  std::unique_ptr<CoordinatorProcess> proc_;
  std::unique_ptr<client::CoordinatorClient> user_;
  std::unique_ptr<client::CoordinatorClient> worker_;
};

TEST_F(CoordinatorIntegrationTest, RegisterSubmitStreamAssignmentsAndWatchToSuccess) {
  auto reg = worker_->RegisterWorker(TestWorkerRequest("node-a", 2));
  ASSERT_TRUE(reg.ok()) << reg.status();
  EXPECT_EQ(reg->heartbeat_interval_ms(), 100);
  EXPECT_EQ(reg->heartbeat_timeout_ms(), 1500);
  Heartbeater hb(worker_.get(), reg->worker_id());
  AssignmentCollector stream(worker_.get(), reg->worker_id());

  auto job = user_->SubmitJob(TestJobSpec("tiny", 2));
  ASSERT_TRUE(job.ok()) << job.status();
  auto got = stream.WaitFor(2);
  ASSERT_EQ(got.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    const Assignment& a = got[r];
    EXPECT_EQ(a.action(), Assignment::START);
    EXPECT_EQ(a.job_id(), *job);
    EXPECT_EQ(a.attempt(), 1);
    EXPECT_EQ(a.rank(), r);
    EXPECT_EQ(a.world_size(), 2);
    EXPECT_EQ(a.local_rank(), r);
    EXPECT_EQ(a.local_world_size(), 2);
    EXPECT_EQ(a.slot_index(), r);
    // The trainer's groups, from the assignment's world size and spec (fsdp/layout.h).
    auto layout = fsdp::ParallelLayout::Create(a.world_size(), a.spec().fsdp().sharding_strategy(),
                                               a.spec().fsdp().hybrid_shard_degree());
    ASSERT_TRUE(layout.ok()) << layout.status();
    EXPECT_EQ(layout->ShardGroupRanks(a.rank()).size(), 2u);
    EXPECT_EQ(layout->ReplicateGroupRanks(a.rank()).size(), 1u);
    EXPECT_EQ(a.rendezvous_namespace(), *job + "/1");
    EXPECT_FALSE(a.rendezvous_secret().empty());
    EXPECT_EQ(a.master_addr(), "127.0.0.1");
    EXPECT_EQ(a.spec().name(), "tiny");
  }
  // Watch: the current status first, then progress, then the end.
  std::vector<JobStatus> seen;
  std::thread watcher([&] {
    absl::Status s = user_->WatchJob(*job, [&](const JobStatus& st) {
      seen.push_back(st);
      return true;
    });
    EXPECT_TRUE(s.ok()) << s;
  });
  absl::SleepFor(absl::Milliseconds(300));
  ProgressReport pr;
  pr.set_job_id(*job);
  pr.set_attempt(1);
  pr.set_rank(0);
  pr.set_step(5);
  pr.set_loss(3.25);
  pr.set_step_time_s(0.1);
  // Reports carry the attempt credential (the START's rendezvous secret), not the join token.
  EXPECT_EQ(worker_->ReportProgress(pr).code(), absl::StatusCode::kUnauthenticated);
  ASSERT_TRUE(worker_->ReportProgress(pr, got[0].rendezvous_secret()).ok());
  absl::SleepFor(absl::Milliseconds(300));
  hb.SetRanks({Exited(*job, 1, 0, 0), Exited(*job, 1, 1, 0)});
  watcher.join();  // ends by itself after the terminal status
  ASSERT_GE(seen.size(), 3u);
  EXPECT_EQ(seen.front().state(), RUNNING);
  bool saw_progress = false;
  for (const JobStatus& st : seen) saw_progress |= st.step() == 5 && st.loss() == 3.25;
  EXPECT_TRUE(saw_progress);
  EXPECT_EQ(seen.back().state(), SUCCEEDED);
  EXPECT_NEAR(seen[seen.size() - 1].eta_s(), 0.5, 1e-9);
  auto workers = user_->ListWorkers();
  ASSERT_TRUE(workers.ok());
  ASSERT_EQ(workers->size(), 1u);
  EXPECT_EQ((*workers)[0].busy_slots(), 0);
  EXPECT_EQ((*workers)[0].state(), WorkerInfo::ALIVE);
  worker_->CancelStreams();
}

TEST_F(CoordinatorIntegrationTest, HeartbeatLossFailsTheAttempt) {
  auto reg = worker_->RegisterWorker(TestWorkerRequest("node-a", 1));
  ASSERT_TRUE(reg.ok());
  auto job = user_->SubmitJob(TestJobSpec("lost", 1));
  ASSERT_TRUE(job.ok());
  // No heartbeats at all: after 1.5 s the worker is dead and the job (no restarts) failed.
  JobStatus st = WaitJob(*job, [](const JobStatus& s) { return s.state() == FAILED; });
  EXPECT_TRUE(HasEvent(st, "WORKER_LOST"));
  EXPECT_NE(st.message().find("missed heartbeats"), std::string::npos) << st.message();
  auto workers = user_->ListWorkers();
  EXPECT_EQ((*workers)[0].state(), WorkerInfo::DEAD);
  HeartbeatRequest hb;
  hb.set_worker_id(reg->worker_id());
  EXPECT_TRUE(worker_->Heartbeat(hb)->reregister());
}

TEST_F(CoordinatorIntegrationTest, FailedRankRestartsFromCommittedCheckpoint) {
  auto reg = worker_->RegisterWorker(TestWorkerRequest("node-a", 1));
  ASSERT_TRUE(reg.ok());
  Heartbeater hb(worker_.get(), reg->worker_id());
  AssignmentCollector stream(worker_.get(), reg->worker_id());
  auto job = user_->SubmitJob(TestJobSpec("restart", 1, /*max_restarts=*/1));
  ASSERT_TRUE(job.ok());
  const std::vector<Assignment> first = stream.WaitFor(1);
  ASSERT_EQ(first.size(), 1u);
  CommitCheckpoint(*job, 1, 5, first[0].rendezvous_secret());
  auto cps = user_->ListCheckpoints(*job);
  ASSERT_TRUE(cps.ok());
  ASSERT_EQ(cps->size(), 1u);
  EXPECT_TRUE((*cps)[0].committed());
  hb.SetRanks({Exited(*job, 1, 0, 1)});
  // STOP for attempt 1, then START for attempt 2 resuming from step 5.
  auto got = stream.WaitFor(3);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[1].action(), Assignment::STOP);
  EXPECT_EQ(got[1].attempt(), 1);
  EXPECT_EQ(got[2].action(), Assignment::START);
  EXPECT_EQ(got[2].attempt(), 2);
  EXPECT_EQ(got[2].resume_step(), 5);
  EXPECT_NE(got[2].rendezvous_secret(), got[0].rendezvous_secret());
  JobStatus st = *user_->GetJob(*job);
  EXPECT_EQ(st.state(), RUNNING);
  EXPECT_EQ(st.attempt(), 2);
  EXPECT_TRUE(HasEvent(st, "RANK_FAILED"));
  EXPECT_TRUE(HasEvent(st, "RESTARTING"));
  worker_->CancelStreams();
}

TEST_F(CoordinatorIntegrationTest, SigkillAndRestartKeepsJobsEventsAndCheckpoints) {
  auto reg = worker_->RegisterWorker(TestWorkerRequest("node-a", 2));
  ASSERT_TRUE(reg.ok());
  auto hb = std::make_unique<Heartbeater>(worker_.get(), reg->worker_id());
  auto running = user_->SubmitJob(TestJobSpec("survivor", 2, /*max_restarts=*/2));
  auto cancelled = user_->SubmitJob(TestJobSpec("cancelled", 1));
  ASSERT_TRUE(running.ok() && cancelled.ok());
  ASSERT_TRUE(user_->CancelJob(*cancelled, "changed my mind").ok());
  WaitJob(*running, [](const JobStatus& s) { return s.state() == RUNNING; });
  // The attempt's credential, from its START on a stream of a client of its own.
  std::string credential;
  {
    auto streamer = *client::CoordinatorClient::Create(proc_->address(), kWorkerToken);
    streamer->SetWorkerCredential(reg->worker_credential());
    AssignmentCollector stream(streamer.get(), reg->worker_id());
    const std::vector<Assignment> starts = stream.WaitFor(1);
    ASSERT_FALSE(starts.empty());
    credential = starts[0].rendezvous_secret();
    streamer->CancelStreams();
  }
  // The daemon lists its running ranks in every heartbeat.
  std::vector<RankStatus> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.push_back(Exited(*running, 1, r, 0));
    ranks.back().set_state(RankStatus::RUNNING);
  }
  hb->SetRanks(ranks);
  CommitCheckpoint(*running, 1, 42, credential);
  const JobStatus before = *user_->GetJob(*running);
  const JobStatus cancelled_before = *user_->GetJob(*cancelled);

  auto status = proc_->Signal(SIGKILL);
  ASSERT_TRUE(status.ok());
  EXPECT_TRUE(WIFSIGNALED(*status));
  hb->Stop();
  StartCoordinator();  // same state_dir, new port
  worker_ = *client::CoordinatorClient::Create(proc_->address(), kWorkerToken);
  // The worker's credential survived the restart (only its digest is stored).
  worker_->SetWorkerCredential(reg->worker_credential());
  HeartbeatRequest probe;
  probe.set_worker_id(reg->worker_id());
  for (const RankStatus& r : ranks) *probe.add_ranks() = r;
  auto answer = worker_->Heartbeat(probe);
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_FALSE(answer->reregister());
  hb = std::make_unique<Heartbeater>(worker_.get(), reg->worker_id(), ranks);

  auto jobs = user_->ListJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 2u);
  JobStatus after = *user_->GetJob(*running);
  EXPECT_EQ(after.state(), RUNNING);
  EXPECT_EQ(after.attempt(), before.attempt());
  EXPECT_EQ(after.latest_checkpoint_step(), 42);
  ASSERT_GE(after.events_size(), before.events_size());
  for (int i = 0; i < before.events_size(); ++i) {
    EXPECT_EQ(after.events(i).SerializeAsString(), before.events(i).SerializeAsString()) << i;
  }
  EXPECT_EQ(user_->GetJob(*cancelled)->SerializeAsString(), cancelled_before.SerializeAsString());
  auto cps = user_->ListCheckpoints(*running);
  ASSERT_TRUE(cps.ok());
  ASSERT_EQ(cps->size(), 1u);
  EXPECT_TRUE((*cps)[0].committed());
  // The worker keeps heartbeating under its old id with its ranks: the attempt goes on.
  absl::SleepFor(absl::Seconds(2));
  after = *user_->GetJob(*running);
  EXPECT_EQ(after.state(), RUNNING);
  EXPECT_EQ(after.attempt(), before.attempt());
  EXPECT_FALSE(HasEvent(after, "WORKER_LOST"));
  EXPECT_FALSE(HasEvent(after, "RANK_LOST"));
  // Its daemon restarts and forgets the ranks: the attempt restarts from step 42.
  hb->SetRanks({});
  after = WaitJob(*running, [](const JobStatus& s) { return s.attempt() == 2; });
  EXPECT_TRUE(HasEvent(after, "RANK_LOST"));
  EXPECT_EQ(after.state(), RUNNING);
  // New ids do not collide with old ones.
  auto next = user_->SubmitJob(TestJobSpec("next", 1));
  ASSERT_TRUE(next.ok());
  EXPECT_NE(*next, *running);
  EXPECT_NE(*next, *cancelled);
}

TEST_F(CoordinatorIntegrationTest, MissingAndWrongTokensAreRefusedAndChangeNothing) {
  auto anonymous = *client::CoordinatorClient::Create(proc_->address(), "");
  auto wrong = *client::CoordinatorClient::Create(proc_->address(), "not-the-token");
  for (client::CoordinatorClient* c : {anonymous.get(), wrong.get(), worker_.get()}) {
    auto sub = c->SubmitJob(TestJobSpec("intruder", 1));
    EXPECT_EQ(sub.status().code(), absl::StatusCode::kUnauthenticated) << sub.status();
    EXPECT_EQ(c->ListJobs().status().code(), absl::StatusCode::kUnauthenticated);
    EXPECT_EQ(c->CancelJob("job-1").code(), absl::StatusCode::kUnauthenticated);
  }
  EXPECT_NE(anonymous->ListJobs().status().message().find("missing"), std::string::npos);
  // Streams and rendezvous refuse too.
  EXPECT_EQ(wrong->WatchJob("job-1", [](const JobStatus&) { return true; }).code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(wrong->StreamAssignments("w1", [](const Assignment&) { return true; }).code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(wrong->RendezvousGet("job-1/1", "s", {"k"}, absl::Seconds(1)).status().code(),
            absl::StatusCode::kUnauthenticated);
  for (client::CoordinatorClient* c : {anonymous.get(), wrong.get(), user_.get()}) {
    auto reg = c->RegisterWorker(TestWorkerRequest("rogue", 4));
    EXPECT_EQ(reg.status().code(), absl::StatusCode::kUnauthenticated) << reg.status();
  }
  auto jobs = user_->ListJobs();
  ASSERT_TRUE(jobs.ok());
  EXPECT_TRUE(jobs->empty());
  EXPECT_TRUE(user_->ListWorkers()->empty());
  // Heartbeats with bad credentials do not keep a worker alive.
  auto reg = worker_->RegisterWorker(TestWorkerRequest("node-a", 1));
  ASSERT_TRUE(reg.ok());
  HeartbeatRequest hb;
  hb.set_worker_id(reg->worker_id());
  for (int i = 0; i < 25; ++i) {
    EXPECT_EQ(wrong->Heartbeat(hb).status().code(), absl::StatusCode::kUnauthenticated);
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_EQ((*user_->ListWorkers())[0].state(), WorkerInfo::DEAD);
}

TEST_F(CoordinatorIntegrationTest, BadSpecIsInvalidArgumentAndServingContinues) {
  JobSpec bad = TestJobSpec("bad", 4);
  bad.mutable_fsdp()->set_hybrid_shard_degree(3);
  auto r = user_->SubmitJob(bad);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("fsdp.hybrid_shard_degree"), std::string::npos) << r.status();
  JobSpec zero = TestJobSpec("zero", 1);
  zero.set_world_size(0);
  r = user_->SubmitJob(zero);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("world_size"), std::string::npos) << r.status();
  JobSpec lr = TestJobSpec("lr", 1);
  lr.mutable_optimizer()->set_lr(-1);  // only spec::Validate knows this one
  r = user_->SubmitJob(lr);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("optimizer.lr"), std::string::npos) << r.status();
  EXPECT_TRUE(user_->ListJobs()->empty());
  auto ok = user_->SubmitJob(TestJobSpec("good", 1));
  EXPECT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(user_->GetJob("job-404").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(CoordinatorIntegrationTest, RendezvousKvStoreOverGrpc) {
  auto reg = worker_->RegisterWorker(TestWorkerRequest("node-a", 1));
  ASSERT_TRUE(reg.ok());
  Heartbeater hb(worker_.get(), reg->worker_id());
  AssignmentCollector stream(worker_.get(), reg->worker_id());
  ASSERT_TRUE(user_->SubmitJob(TestJobSpec("kv", 1)).ok());
  auto got = stream.WaitFor(1);
  ASSERT_EQ(got.size(), 1u);
  // A trainer's client: the attempt credential is its token.
  std::shared_ptr<client::CoordinatorClient> shared =
      *client::CoordinatorClient::Create(proc_->address(), got[0].rendezvous_secret());
  trainer::RendezvousKvStore kv(shared, got[0].rendezvous_namespace(), got[0].rendezvous_secret());
  std::thread late([&] {
    absl::SleepFor(absl::Milliseconds(200));
    EXPECT_TRUE(kv.Set("rank1/addr", std::string("\x01\x02\0", 3)).ok());
  });
  ASSERT_TRUE(kv.Set("rank0/addr", "10.0.0.1:1234").ok());
  auto v = kv.Get({"rank0/addr", "rank1/addr"}, absl::Seconds(10));
  late.join();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ((*v)[0], "10.0.0.1:1234");
  EXPECT_EQ((*v)[1], std::string("\x01\x02\0", 3));
  auto missing = kv.Get({"nobody"}, absl::Milliseconds(300));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(missing.status().message().find("nobody"), std::string::npos);
  trainer::RendezvousKvStore thief(shared, got[0].rendezvous_namespace(), "guessed");
  EXPECT_EQ(thief.Get({"rank0/addr"}, absl::Milliseconds(100)).status().code(),
            absl::StatusCode::kPermissionDenied);
  worker_->CancelStreams();
}

TEST(RendezvousKvStore, SetRetriesUnavailableWithinItsBound) {
  // Nothing listens there: every call is UNAVAILABLE, as while the coordinator restarts.
  std::shared_ptr<client::CoordinatorClient> client =
      *client::CoordinatorClient::Create("127.0.0.1:1", "token");
  trainer::RendezvousKvStore kv(client, "job-1/1", "secret", absl::Milliseconds(700));
  const absl::Time start = absl::Now();
  const absl::Status s = kv.Set("rank0/addr", "10.0.0.1:1234");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(400));  // retried, not answered at once
}

int ThreadCount(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  }
  return -1;
}

TEST_F(CoordinatorIntegrationTest, WaitingRendezvousGetsAndStreamsHoldNoThreads) {
  auto reg = worker_->RegisterWorker(TestWorkerRequest("node-a", 1));
  ASSERT_TRUE(reg.ok());
  Heartbeater hb(worker_.get(), reg->worker_id());
  AssignmentCollector stream(worker_.get(), reg->worker_id());
  ASSERT_TRUE(user_->SubmitJob(TestJobSpec("many", 1)).ok());
  auto got = stream.WaitFor(1);
  ASSERT_EQ(got.size(), 1u);
  const std::string ns = got[0].rendezvous_namespace(), secret = got[0].rendezvous_secret();
  const int threads_before = ThreadCount(proc_->pid());
  // 200 ranks wait for one key, each on its own call (the async client keeps this test light).
  constexpr int kWaiters = 200;
  auto channel = grpc::CreateChannel(proc_->address(), grpc::InsecureChannelCredentials());
  auto stub = ::shardline::Coordinator::NewStub(channel);
  AsyncCalls<RendezvousGetResponse> calls;
  RendezvousGetRequest req;
  req.set_namespace_(ns);
  req.set_secret(secret);
  req.add_keys("ready");
  req.set_timeout_ms(20000);
  for (int i = 0; i < kWaiters; ++i) {
    calls.Start(secret, [&](grpc::ClientContext* ctx, grpc::CompletionQueue* cq) {
      return stub->AsyncRendezvousGet(ctx, req, cq);
    });
  }
  absl::SleepFor(absl::Milliseconds(500));
  const int threads_waiting = ThreadCount(proc_->pid());
  EXPECT_LT(threads_waiting - threads_before, 20)
      << "before " << threads_before << ", with " << kWaiters << " waiting calls "
      << threads_waiting;
  ASSERT_TRUE(client::CoordinatorClient::Create(proc_->address(), secret)
                  .value()
                  ->RendezvousSet(ns, secret, "ready", "go")
                  .ok());
  const int done = calls.FinishAll([](const auto& c) {
    EXPECT_TRUE(c.status.ok()) << c.status.error_message();
    if (c.status.ok()) EXPECT_EQ(c.resp.values(0), "go");
  });
  EXPECT_EQ(done, kWaiters);
  worker_->CancelStreams();
}

// fault_tolerance REPLICA_GROUPS: every rank's StepVote waits for the step's decision; at
// hundreds of ranks a thread per waiting vote would exhaust the server's thread quota
// (--grpc_max_threads) and the step could never be decided. Votes wait on the callback API.
TEST_F(CoordinatorIntegrationTest, WaitingStepVotesHoldNoThreadsAndAllGetTheCommit) {
  constexpr int kWorld = 96;  // 48 replica groups of 2.
  auto reg = worker_->RegisterWorker(TestWorkerRequest("node-a", kWorld));
  ASSERT_TRUE(reg.ok());
  Heartbeater hb(worker_.get(), reg->worker_id());
  AssignmentCollector stream(worker_.get(), reg->worker_id());
  JobSpec spec = TestJobSpec("ft-votes", kWorld);
  spec.mutable_fsdp()->set_sharding_strategy(FsdpSpec::HYBRID_SHARD);
  spec.mutable_fsdp()->set_hybrid_shard_degree(2);
  spec.mutable_fault_tolerance()->set_mode(FaultToleranceSpec::REPLICA_GROUPS);
  spec.mutable_fault_tolerance()->set_min_replicas(1);
  spec.mutable_fault_tolerance()->set_vote_timeout_s(10);
  auto job = user_->SubmitJob(spec);
  ASSERT_TRUE(job.ok()) << job.status();
  auto got = stream.WaitFor(kWorld);
  ASSERT_EQ(got.size(), static_cast<size_t>(kWorld));
  const std::string secret = got[0].rendezvous_secret();
  const int threads_before = ThreadCount(proc_->pid());
  auto channel = grpc::CreateChannel(proc_->address(), grpc::InsecureChannelCredentials());
  auto stub = ::shardline::Coordinator::NewStub(channel);
  AsyncCalls<StepVoteResponse> calls;
  auto vote = [&](int rank) {
    StepVoteRequest req;
    req.set_job_id(*job);
    req.set_attempt(1);
    req.set_rank(rank);
    req.set_step(1);
    req.set_ok(true);
    req.set_loss(2.0 + rank);
    calls.Start(secret, [&](grpc::ClientContext* ctx, grpc::CompletionQueue* cq) {
      return stub->AsyncStepVote(ctx, req, cq);
    });
  };
  // All but the last rank vote; the step cannot be decided yet, so every one of them waits.
  for (int r = 0; r + 1 < kWorld; ++r) vote(r);
  absl::SleepFor(absl::Milliseconds(800));
  const int threads_waiting = ThreadCount(proc_->pid());
  EXPECT_LT(threads_waiting - threads_before, 20)
      << "before " << threads_before << ", with " << kWorld - 1 << " waiting votes "
      << threads_waiting;
  vote(kWorld - 1);  // The last vote decides the step: everybody gets the COMMIT.
  const int done = calls.FinishAll([&](const auto& c) {
    EXPECT_TRUE(c.status.ok()) << c.status.error_message();
    if (c.status.ok()) {
      EXPECT_EQ(c.resp.decision(), StepVoteResponse::COMMIT);
      EXPECT_EQ(c.resp.step(), 1);
      EXPECT_DOUBLE_EQ(c.resp.loss(), 2.0 + (kWorld - 1) / 2.0);  // the members' mean
    }
  });
  EXPECT_EQ(done, kWorld);
  worker_->CancelStreams();
}

TEST_F(CoordinatorIntegrationTest, PrometheusMetricsCountJobsWorkersAndRpcs) {
  ASSERT_FALSE(proc_->metrics_address().empty());
  auto reg = worker_->RegisterWorker(TestWorkerRequest("node-a", 1));
  ASSERT_TRUE(reg.ok());
  Heartbeater hb(worker_.get(), reg->worker_id());
  ASSERT_TRUE(user_->SubmitJob(TestJobSpec("m1", 1)).ok());
  ASSERT_TRUE(user_->SubmitJob(TestJobSpec("m2", 1)).ok());
  auto anonymous = *client::CoordinatorClient::Create(proc_->address(), "");
  (void)anonymous->ListJobs();
  absl::SleepFor(absl::Milliseconds(300));
  const std::string text = HttpGet(proc_->metrics_address(), "/metrics");
  EXPECT_NE(text.find("HTTP/1.1 200 OK"), std::string::npos) << text;  // cpp-httplib answers 1.1
  EXPECT_NE(text.find("shardline_jobs{state=\"RUNNING\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("shardline_jobs{state=\"PENDING\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("shardline_workers{state=\"ALIVE\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("shardline_attempts_started_total 1\n"), std::string::npos) << text;
  // prometheus-cpp writes labels sorted by name: match them as a set.
  EXPECT_EQ(Sample(text, "shardline_rpc_total", {"method=\"SubmitJob\"", "code=\"OK\""}), "2")
      << text;
  EXPECT_EQ(
      Sample(text, "shardline_rpc_total", {"method=\"ListJobs\"", "code=\"UNAUTHENTICATED\""}), "1")
      << text;
  EXPECT_NE(text.find("shardline_rpc_latency_seconds_count{method=\"Heartbeat\"}"),
            std::string::npos);
  EXPECT_TRUE(
      Sample(text, "shardline_worker_heartbeat_age_seconds", {"worker=\"w1\"", "node=\"node-a\""})
          .has_value())
      << text;
  EXPECT_NE(HttpGet(proc_->metrics_address(), "/other").find("404"), std::string::npos);
}

TEST_F(CoordinatorIntegrationTest, SigtermEndsOpenStreamsAndExitsCleanly) {
  // Submitted before any worker is alive (so not refused as never placeable): it never fits the
  // one slot registered next, and stays PENDING.
  auto job = user_->SubmitJob(TestJobSpec("pending", 4));
  ASSERT_TRUE(job.ok()) << job.status();
  auto reg = worker_->RegisterWorker(TestWorkerRequest("node-a", 1));
  ASSERT_TRUE(reg.ok());
  absl::Status watch_status, stream_status;
  int watched = 0;
  std::thread watcher([&] {
    watch_status = user_->WatchJob(*job, [&](const JobStatus&) {
      ++watched;
      return true;
    });
  });
  std::thread streamer([&] {
    stream_status =
        worker_->StreamAssignments(reg->worker_id(), [](const Assignment&) { return true; });
  });
  absl::SleepFor(absl::Milliseconds(500));
  auto status = proc_->Signal(SIGTERM);
  watcher.join();
  streamer.join();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << *status;
  EXPECT_GE(watched, 1);
  EXPECT_EQ(watch_status.code(), absl::StatusCode::kUnavailable) << watch_status;
  EXPECT_EQ(stream_status.code(), absl::StatusCode::kUnavailable) << stream_status;
}

// A client that opens the metrics port and sends half a request neither delays another scrape
// nor holds up shutdown (the metrics server shuts its connections down before joining).
TEST_F(CoordinatorIntegrationTest, SlowMetricsClientDelaysNeitherScrapesNorShutdown) {
  const std::string address = proc_->metrics_address();
  const size_t colon = address.rfind(':');
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(colon + 1))));
  inet_pton(AF_INET, address.substr(0, colon).c_str(), &addr.sin_addr);
  const int slow = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(connect(slow, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(write(slow, "GET /metr", 9), 9);  // and nothing more
  absl::SleepFor(absl::Milliseconds(200));
  absl::Time start = absl::Now();
  EXPECT_NE(HttpGet(address, "/metrics").find(" 200 OK"), std::string::npos);
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  start = absl::Now();
  auto status = proc_->Signal(SIGTERM);
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << *status;
  // The slow request alone could hold a thread for --metrics_request_timeout_ms (5 s).
  EXPECT_LT(absl::Now() - start, absl::Seconds(4));
  close(slow);
}

TEST_F(CoordinatorIntegrationTest, HealthServiceReportsServing) {
  // grpc.health.v1.Health/Check with an empty HealthCheckRequest (service ""), through the
  // generic stub: the response is HealthCheckResponse{status: SERVING (1)} = bytes 08 01.
  auto channel = grpc::CreateChannel(proc_->address(), grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::ByteBuffer request, response;
  grpc::Slice empty("", 0);
  request = grpc::ByteBuffer(&empty, 1);
  grpc::CompletionQueue cq;
  auto call = stub.PrepareUnaryCall(&ctx, "/grpc.health.v1.Health/Check", request, &cq);
  call->StartCall();
  grpc::Status status;
  call->Finish(&response, &status, reinterpret_cast<void*>(1));
  void* tag;
  bool ok;
  ASSERT_TRUE(cq.Next(&tag, &ok));
  ASSERT_TRUE(status.ok()) << status.error_message();
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(response.Dump(&slices).ok());
  std::string bytes;
  for (const grpc::Slice& sl : slices)
    bytes.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
  EXPECT_EQ(bytes, std::string("\x08\x01", 2));
}

TEST(CoordinatorListen, NonLoopbackWithoutTokensRefusesUnlessInsecure) {
  CoordinatorProcess::Options o;
  o.binary = CoordinatorBinaryPath();
  o.args = {"--listen=0.0.0.0:0"};
  o.stderr_path = TestTmpPath("refuse.stderr");
  auto p = CoordinatorProcess::Start(o);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(p.status().message().find("exit code 1"), std::string::npos) << p.status();
  EXPECT_NE(p.status().message().find("refusing to listen on non-loopback address"),
            std::string::npos)
      << p.status();
  o.args.push_back("--insecure");
  auto q = CoordinatorProcess::Start(o);
  ASSERT_TRUE(q.ok()) << q.status();
  // SIGTERM is a clean shutdown.
  auto status = (*q)->Signal(SIGTERM);
  ASSERT_TRUE(status.ok());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << *status;
}

}  // namespace
}  // namespace shardline::coordinator
