// Credentials and users against the real coordinator binary over gRPC on loopback (issue #14
// items 2 and 3): per-worker credentials (forged heartbeats, stream hijacks, re-registration),
// per-attempt credentials (what a trainer's credential may and may not do, reports for other
// jobs and attempts, forged checkpoints without it, late reports of an ended attempt), named
// users from a reloadable users file (owners, admins, WhoAmI). Every refusal is checked for its
// code and message, and afterwards that nothing changed and the coordinator still serves.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/client.h"
#include "coordinator/testing/coordinator_process.h"
#include "coordinator/testing/test_jobs.h"
#include "gtest/gtest.h"
#include "proto/coordinator.grpc.pb.h"

namespace shardline::coordinator {
namespace {

constexpr char kJoinToken[] = "auth-test-join-token";
constexpr char kAlice[] = "alice-token-0123456789";
constexpr char kBob[] = "bob-token-0123456789";
constexpr char kRoot[] = "root-token-0123456789";

// Writes `text` to `path` with `mode` through a rename, as an editor or config tool would.
void WriteFile(const std::string& path, const std::string& text, mode_t mode = 0600) {
  const std::string tmp = path + ".tmp";
  const int fd = open(tmp.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  close(fd);
  ASSERT_EQ(chmod(tmp.c_str(), mode), 0);
  ASSERT_EQ(rename(tmp.c_str(), path.c_str()), 0);
}

// A daemon stand-in: heartbeats (with the rank statuses the test sets) and collects the
// worker's assignments, each on a client of its own carrying the worker's credential.
class FakeDaemon {
 public:
  FakeDaemon(const std::string& address, const RegisterWorkerResponse& reg)
      : worker_id_(reg.worker_id()),
        hb_client_(*client::CoordinatorClient::Create(address, kJoinToken)),
        stream_client_(*client::CoordinatorClient::Create(address, kJoinToken)) {
    hb_client_->SetWorkerCredential(reg.worker_credential());
    stream_client_->SetWorkerCredential(reg.worker_credential());
    heartbeat_ = std::thread([this] {
      while (!stop_) {
        HeartbeatRequest hb;
        hb.set_worker_id(worker_id_);
        {
          absl::MutexLock lock(&mu_);
          for (const RankStatus& r : ranks_) *hb.add_ranks() = r;
        }
        (void)hb_client_->Heartbeat(hb);
        absl::SleepFor(absl::Milliseconds(100));
      }
    });
    stream_ = std::thread([this] {
      (void)stream_client_->StreamAssignments(worker_id_, [this](const Assignment& a) {
        absl::MutexLock lock(&mu_);
        got_.push_back(a);
        if (a.action() == Assignment::START) {
          RankStatus r;
          r.set_job_id(a.job_id());
          r.set_attempt(a.attempt());
          r.set_rank(a.rank());
          r.set_state(RankStatus::RUNNING);
          ranks_.push_back(r);
        }
        return true;
      });
    });
  }
  ~FakeDaemon() {
    stop_ = true;
    stream_client_->CancelStreams();
    heartbeat_.join();
    stream_.join();
  }
  // The START of `job`'s attempt `attempt` (rank 0), waiting up to 20 s.
  Assignment WaitStart(const std::string& job, int attempt) {
    absl::MutexLock lock(&mu_);
    const Assignment* found = nullptr;
    auto has = [&]() {
      for (const Assignment& a : got_) {
        if (a.action() == Assignment::START && a.job_id() == job && a.attempt() == attempt) {
          found = &a;
          return true;
        }
      }
      return false;
    };
    mu_.AwaitWithTimeout(absl::Condition(&has), absl::Seconds(20));
    EXPECT_NE(found, nullptr) << "no START of " << job << " attempt " << attempt;
    return found ? *found : Assignment();
  }
  // Reports rank `rank` of `job` attempt `attempt` exited with `code` from now on.
  void Exit(const std::string& job, int attempt, int code) {
    absl::MutexLock lock(&mu_);
    for (RankStatus& r : ranks_) {
      if (r.job_id() == job && r.attempt() == attempt) {
        r.set_state(RankStatus::EXITED);
        r.set_exit_code(code);
      }
    }
  }
  size_t assignments() {
    absl::MutexLock lock(&mu_);
    return got_.size();
  }

 private:
  const std::string worker_id_;
  std::unique_ptr<client::CoordinatorClient> hb_client_;
  std::unique_ptr<client::CoordinatorClient> stream_client_;
  std::atomic<bool> stop_{false};
  absl::Mutex mu_;
  std::vector<Assignment> got_ ABSL_GUARDED_BY(mu_);
  std::vector<RankStatus> ranks_ ABSL_GUARDED_BY(mu_);
  std::thread heartbeat_;
  std::thread stream_;
};

class AuthIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    users_file_ = TestTmpPath(name + ".users");
    WriteFile(users_file_, absl::StrCat("# name token [admin]\n", "alice ", kAlice, "\n", "bob ",
                                        kBob, "   # a comment\n", "root ", kRoot, " admin\n"));
    CoordinatorProcess::Options o;
    o.binary = CoordinatorBinaryPath();
    o.args = {"--listen=127.0.0.1:0",
              absl::StrCat("--state_dir=", TestTmpPath(name + ".state")),
              "--heartbeat_interval_ms=100",
              "--heartbeat_timeout_ms=3000",
              "--tick_ms=50",
              absl::StrCat("--users_file=", users_file_),
              absl::StrCat("--worker_token=", kJoinToken),
              "--stop_grace_s=1"};
    auto p = CoordinatorProcess::Start(o);
    ASSERT_TRUE(p.ok()) << p.status();
    proc_ = std::move(*p);
    alice_ = Client(kAlice);
    bob_ = Client(kBob);
    root_ = Client(kRoot);
    ASSERT_TRUE(alice_->WaitForReady(absl::Seconds(10)).ok());
    join_ = Client(kJoinToken);
    auto reg = join_->RegisterWorker(TestWorkerRequest("node-a", 2));
    ASSERT_TRUE(reg.ok()) << reg.status();
    reg_a_ = *reg;
    daemon_ = std::make_unique<FakeDaemon>(proc_->address(), reg_a_);
  }
  void TearDown() override {
    daemon_.reset();
    proc_.reset();
  }
  std::unique_ptr<client::CoordinatorClient> Client(const std::string& token) {
    return *client::CoordinatorClient::Create(proc_->address(), token);
  }
  // Submits `spec` as `user` and returns the job id and the START of its first attempt.
  std::pair<std::string, Assignment> StartJob(client::CoordinatorClient* user,
                                              const JobSpec& spec) {
    auto id = user->SubmitJob(spec);
    EXPECT_TRUE(id.ok()) << id.status();
    if (!id.ok()) return {};
    return {*id, daemon_->WaitStart(*id, 1)};
  }
  JobStatus Job(const std::string& id) {
    auto st = root_->GetJob(id);
    EXPECT_TRUE(st.ok()) << st.status();
    return st.ok() ? *st : JobStatus();
  }
  // The job's persistent state, without the fields heartbeats and time move.
  static std::string Fingerprint(JobStatus st) {
    st.clear_events();
    st.clear_per_rank_peak_memory_bytes();
    return st.SerializeAsString();
  }
  void ExpectServing() {
    auto jobs = alice_->ListJobs();
    EXPECT_TRUE(jobs.ok()) << jobs.status();
    auto workers = root_->ListWorkers();
    ASSERT_TRUE(workers.ok()) << workers.status();
    for (const WorkerInfo& w : *workers) {
      if (w.worker_id() == reg_a_.worker_id()) EXPECT_EQ(w.state(), WorkerInfo::ALIVE);
    }
  }
  static void ExpectStatus(const absl::Status& s, absl::StatusCode code, const std::string& text) {
    EXPECT_EQ(s.code(), code) << s;
    EXPECT_NE(s.message().find(text), std::string::npos) << "\"" << text << "\" not in: " << s;
  }
  static CheckpointReport Checkpoint(const std::string& job, int attempt, int64_t step) {
    CheckpointReport r;
    r.set_job_id(job);
    r.set_attempt(attempt);
    r.set_step(step);
    r.set_path(absl::StrCat("/forged/", job, "/step_", step));
    r.add_files("shard_00000.bin");
    r.add_files("MANIFEST.json");
    r.set_expected_files(1);
    r.set_manifest_committed(true);
    return r;
  }
  static ProgressReport Progress(const std::string& job, int attempt, int rank, int64_t step) {
    ProgressReport p;
    p.set_job_id(job);
    p.set_attempt(attempt);
    p.set_rank(rank);
    p.set_step(step);
    p.set_loss(1.5);
    return p;
  }

  std::string users_file_;
  std::unique_ptr<CoordinatorProcess> proc_;
  std::unique_ptr<client::CoordinatorClient> alice_, bob_, root_, join_;
  RegisterWorkerResponse reg_a_;
  std::unique_ptr<FakeDaemon> daemon_;
};

TEST_F(AuthIntegrationTest, RegisterWorkerIssuesACredentialListWorkersNeverShows) {
  EXPECT_EQ(reg_a_.worker_credential().size(), 64u);
  auto workers = root_->ListWorkers();
  ASSERT_TRUE(workers.ok());
  ASSERT_EQ(workers->size(), 1u);
  EXPECT_EQ((*workers)[0].DebugString().find(reg_a_.worker_credential()), std::string::npos);
}

TEST_F(AuthIntegrationTest, ForgedHeartbeatForAnotherWorkerIsPermissionDenied) {
  auto [job, start] = StartJob(alice_.get(), TestJobSpec("victim"));
  const std::string before = Fingerprint(Job(job));
  // Worker b, with the join token and its own credential, heartbeats as worker a with no ranks
  // (which would fail a's job with RANK_LOST) and as a with a's rank EXITED 0 (SUCCEEDED).
  auto b = Client(kJoinToken);
  auto reg_b = b->RegisterWorker(TestWorkerRequest("node-b", 1));
  ASSERT_TRUE(reg_b.ok()) << reg_b.status();
  HeartbeatRequest forged;
  forged.set_worker_id(reg_a_.worker_id());
  RankStatus* done = forged.add_ranks();
  done->set_job_id(job);
  done->set_attempt(1);
  done->set_rank(0);
  done->set_state(RankStatus::EXITED);
  for (int i = 0; i < 5; ++i) {
    ExpectStatus(b->Heartbeat(forged).status(), absl::StatusCode::kPermissionDenied,
                 "worker credential does not match worker " + reg_a_.worker_id());
  }
  forged.clear_ranks();
  ExpectStatus(b->Heartbeat(forged).status(), absl::StatusCode::kPermissionDenied,
               "worker credential does not match worker " + reg_a_.worker_id());
  // With the join token but no worker credential at all.
  ExpectStatus(Client(kJoinToken)->Heartbeat(forged).status(), absl::StatusCode::kUnauthenticated,
               "missing \"x-shardline-worker-credential\" metadata");
  absl::SleepFor(absl::Milliseconds(500));
  const JobStatus after = Job(job);
  EXPECT_EQ(after.state(), RUNNING);
  EXPECT_EQ(Fingerprint(after), before);
  ExpectServing();
}

TEST_F(AuthIntegrationTest, StreamHijackWithAnotherWorkersIdIsRefused) {
  auto b = Client(kJoinToken);
  RegisterWorkerRequest gpu = TestWorkerRequest("node-b", 1);
  gpu.mutable_slots(0)->set_kind(Slot::CUDA);  // CPU jobs go to a
  ASSERT_TRUE(b->RegisterWorker(gpu).ok());
  ExpectStatus(b->StreamAssignments(
                   reg_a_.worker_id(), [](const Assignment&) { return true; }, absl::Seconds(5)),
               absl::StatusCode::kPermissionDenied,
               "worker credential does not match worker " + reg_a_.worker_id());
  // a's own stream still gets its work.
  auto [job, start] = StartJob(alice_.get(), TestJobSpec("after-hijack"));
  EXPECT_EQ(start.job_id(), job);
  ExpectServing();
}

// #31 item 4: with the join token alone, RegisterWorker of a live node's name used to replace its
// credential and hand the caller its assignments (other teams' attempt credentials).
TEST_F(AuthIntegrationTest, ALiveNodeIsNotRegisteredAgainWithoutItsCurrentCredential) {
  for (const std::string presented : {std::string(), std::string("forged-credential")}) {
    auto thief = Client(kJoinToken);
    thief->SetWorkerCredential(presented);
    ExpectStatus(
        thief->RegisterWorker(TestWorkerRequest("node-a", 2)).status(),
        absl::StatusCode::kPermissionDenied,
        "RegisterWorker: node node-a is registered as worker " + reg_a_.worker_id() + " and alive");
  }
  // a keeps its credential, its stream and its work.
  auto own = Client(kJoinToken);
  own->SetWorkerCredential(reg_a_.worker_credential());
  HeartbeatRequest hb;
  hb.set_worker_id(reg_a_.worker_id());
  auto beat = own->Heartbeat(hb);
  ASSERT_TRUE(beat.ok()) << beat.status();
  EXPECT_FALSE(beat->reregister());
  auto [job, start] = StartJob(alice_.get(), TestJobSpec("after-takeover-attempt"));
  EXPECT_EQ(start.job_id(), job);
  ExpectServing();
}

TEST_F(AuthIntegrationTest, ReregistrationIssuesANewCredentialAndTheOldOneStopsWorking) {
  auto again = Client(kJoinToken);
  again->SetWorkerCredential(reg_a_.worker_credential());  // its own daemon, registering again
  auto reg = again->RegisterWorker(TestWorkerRequest("node-a", 2));
  ASSERT_TRUE(reg.ok()) << reg.status();
  EXPECT_EQ(reg->worker_id(), reg_a_.worker_id());
  EXPECT_NE(reg->worker_credential(), reg_a_.worker_credential());
  auto old = Client(kJoinToken);
  old->SetWorkerCredential(reg_a_.worker_credential());
  HeartbeatRequest hb;
  hb.set_worker_id(reg_a_.worker_id());
  ExpectStatus(old->Heartbeat(hb).status(), absl::StatusCode::kPermissionDenied,
               "worker credential does not match worker " + reg_a_.worker_id());
  auto fresh = again->Heartbeat(hb);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_FALSE(fresh->reregister());
}

TEST_F(AuthIntegrationTest, AttemptCredentialMayOnlyReportAndRendezvous) {
  auto [job, start] = StartJob(alice_.get(), TestJobSpec("trainer"));
  const std::string credential = start.rendezvous_secret();
  const JobStatus before = Job(job);
  auto trainer = Client(credential);
  const std::string what =
      absl::StrCat("an attempt credential (job ", job, " attempt 1) may only call ReportProgress");
  ExpectStatus(trainer->SubmitJob(TestJobSpec("from-a-trainer")).status(),
               absl::StatusCode::kPermissionDenied, what);
  ExpectStatus(trainer->SubmitJob(TestJobSpec("from-a-trainer")).status(),
               absl::StatusCode::kPermissionDenied, "SubmitJob needs a user token");
  ExpectStatus(trainer->CancelJob(job), absl::StatusCode::kPermissionDenied, what);
  ExpectStatus(trainer->ListJobs().status(), absl::StatusCode::kPermissionDenied, what);
  ExpectStatus(trainer->ListCheckpoints(job).status(), absl::StatusCode::kPermissionDenied, what);
  ExpectStatus(trainer->WatchJob(job, [](const JobStatus&) { return true; }),
               absl::StatusCode::kPermissionDenied, what);
  ExpectStatus(trainer->RegisterWorker(TestWorkerRequest("rogue", 1)).status(),
               absl::StatusCode::kPermissionDenied, "RegisterWorker needs the worker join token");
  HeartbeatRequest hb;
  hb.set_worker_id(reg_a_.worker_id());
  ExpectStatus(trainer->Heartbeat(hb).status(), absl::StatusCode::kPermissionDenied, what);
  // What it may do.
  EXPECT_TRUE(trainer->ReportProgress(Progress(job, 1, 0, 3)).ok());
  EXPECT_TRUE(trainer->RendezvousSet(start.rendezvous_namespace(), credential, "k", "v").ok());
  auto whoami = trainer->WhoAmI();
  ASSERT_TRUE(whoami.ok()) << whoami.status();
  EXPECT_EQ(whoami->credential(), "attempt credential");
  EXPECT_EQ(whoami->job_id(), job);
  EXPECT_EQ(whoami->attempt(), 1);
  // Nothing was submitted, cancelled or registered.
  EXPECT_EQ(root_->ListJobs()->size(), 1u);
  EXPECT_EQ(Job(job).state(), RUNNING);
  EXPECT_EQ(Job(job).attempt(), before.attempt());
  EXPECT_EQ(root_->ListWorkers()->size(), 1u);
  ExpectServing();
}

// StepVote over raw gRPC (the trainer's client is client::CoordinatorClient::StepVote): the bearer
// must be the attempt credential of the job and attempt voted for.
TEST_F(AuthIntegrationTest, StepVoteNeedsTheAttemptCredentialOfItsAttempt) {
  auto [a, start_a] = StartJob(alice_.get(), TestJobSpec("vote-a"));
  auto [b, start_b] = StartJob(bob_.get(), TestJobSpec("vote-b"));
  auto stub = ::shardline::Coordinator::NewStub(
      grpc::CreateChannel(proc_->address(), grpc::InsecureChannelCredentials()));
  auto vote = [&](const std::string& token, const std::string& job) {
    grpc::ClientContext ctx;
    if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    StepVoteRequest req;
    req.set_job_id(job);
    req.set_attempt(1);
    req.set_rank(0);
    req.set_step(1);
    req.set_ok(true);
    StepVoteResponse resp;
    const grpc::Status s = stub->StepVote(&ctx, req, &resp);
    return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
  };
  ExpectStatus(vote("", a), absl::StatusCode::kUnauthenticated,
               "StepVote needs the credential of a running job attempt");
  ExpectStatus(vote(kAlice, a), absl::StatusCode::kUnauthenticated,
               "StepVote needs the credential of a running job attempt");
  ExpectStatus(vote(kJoinToken, a), absl::StatusCode::kUnauthenticated,
               "StepVote needs the credential of a running job attempt");
  ExpectStatus(vote(start_b.rendezvous_secret(), a), absl::StatusCode::kPermissionDenied,
               absl::StrCat("may not report for job ", a, " attempt 1"));
  // Its own credential passes; the job has no replica groups to vote in.
  ExpectStatus(vote(start_a.rendezvous_secret(), a), absl::StatusCode::kFailedPrecondition,
               "does not use fault_tolerance.mode REPLICA_GROUPS");
  ExpectServing();
}

TEST_F(AuthIntegrationTest, ReportForAnotherJobOrAttemptWithAValidCredentialIsRefused) {
  auto [a, start_a] = StartJob(alice_.get(), TestJobSpec("a"));
  auto [b, start_b] = StartJob(bob_.get(), TestJobSpec("b"));
  const JobStatus b_before = Job(b);
  auto trainer_a = Client(start_a.rendezvous_secret());
  ExpectStatus(trainer_a->ReportProgress(Progress(b, 1, 0, 9)), absl::StatusCode::kPermissionDenied,
               absl::StrCat("the attempt credential of job ", a,
                            " attempt 1 may not report for job ", b, " attempt 1"));
  ExpectStatus(trainer_a->ReportCheckpoint(Checkpoint(b, 1, 1000000000000)),
               absl::StatusCode::kPermissionDenied,
               absl::StrCat("may not report for job ", b, " attempt 1"));
  ExpectStatus(trainer_a->ReportProgress(Progress(a, 2, 0, 9)), absl::StatusCode::kPermissionDenied,
               absl::StrCat("may not report for job ", a, " attempt 2"));
  ExpectStatus(trainer_a->RendezvousSet(start_b.rendezvous_namespace(), start_b.rendezvous_secret(),
                                        "k", "v"),
               absl::StatusCode::kPermissionDenied,
               absl::StrCat("may only use rendezvous namespace ", a, "/1, not ", b, "/1"));
  // A rank outside the attempt's world (W=1) is refused by the core.
  ExpectStatus(trainer_a->ReportProgress(Progress(a, 1, 1, 9)), absl::StatusCode::kInvalidArgument,
               "rank: 1 outside world of 1");
  const JobStatus b_after = Job(b);
  EXPECT_EQ(Fingerprint(b_after), Fingerprint(b_before));
  EXPECT_EQ(b_after.step(), 0);
  EXPECT_TRUE(root_->ListCheckpoints(b)->empty());
  ExpectServing();
}

TEST_F(AuthIntegrationTest, ForgedCheckpointWithoutTheAttemptCredentialIsRefused) {
  auto [job, start] =
      StartJob(alice_.get(), TestJobSpec("resumable", /*world_size=*/1, /*max_restarts=*/1));
  const std::string before = Fingerprint(Job(job));
  const CheckpointReport forged = Checkpoint(job, 1, 1000000000000);
  ExpectStatus(join_->ReportCheckpoint(forged), absl::StatusCode::kUnauthenticated,
               "ReportCheckpoint needs the credential of a running job attempt");
  ExpectStatus(alice_->ReportCheckpoint(forged), absl::StatusCode::kUnauthenticated,
               "ReportCheckpoint needs the credential of a running job attempt");
  ExpectStatus(Client("")->ReportCheckpoint(forged), absl::StatusCode::kUnauthenticated,
               "missing \"authorization: Bearer <attempt credential>\" metadata");
  ExpectStatus(join_->ReportProgress(Progress(job, 1, 0, 1000000000000)),
               absl::StatusCode::kUnauthenticated, "ReportProgress needs the credential");
  EXPECT_TRUE(root_->ListCheckpoints(job)->empty());
  const JobStatus after = Job(job);
  EXPECT_EQ(after.latest_checkpoint_step(), 0);
  EXPECT_EQ(Fingerprint(after), before);
  ExpectServing();
}

TEST_F(AuthIntegrationTest, CredentialOfAnEndedAttemptStopsWorking) {
  auto [job, start] =
      StartJob(alice_.get(), TestJobSpec("restarts", /*world_size=*/1, /*max_restarts=*/1));
  auto attempt1 = Client(start.rendezvous_secret());
  ASSERT_TRUE(attempt1->ReportCheckpoint(Checkpoint(job, 1, 5)).ok());
  daemon_->Exit(job, 1, 1);  // rank 0 fails: attempt 2 starts from step 5
  const Assignment start2 = daemon_->WaitStart(job, 2);
  EXPECT_EQ(start2.resume_step(), 5);
  EXPECT_NE(start2.rendezvous_secret(), start.rendezvous_secret());
  const std::string before = Fingerprint(Job(job));
  // A late (or forged) report of attempt 1 while attempt 2 runs: its credential is gone.
  ExpectStatus(attempt1->ReportCheckpoint(Checkpoint(job, 1, 1000000000000)),
               absl::StatusCode::kUnauthenticated, "stops working when the attempt ends");
  ExpectStatus(attempt1->ReportCheckpoint(Checkpoint(job, 2, 1000000000000)),
               absl::StatusCode::kUnauthenticated, "stops working when the attempt ends");
  // Attempt 2's credential reports only as attempt 2.
  auto attempt2 = Client(start2.rendezvous_secret());
  ExpectStatus(attempt2->ReportProgress(Progress(job, 1, 0, 7)),
               absl::StatusCode::kPermissionDenied,
               absl::StrCat("the attempt credential of job ", job,
                            " attempt 2 may not report for job ", job, " attempt 1"));
  EXPECT_EQ(Fingerprint(Job(job)), before);
  auto checkpoints = root_->ListCheckpoints(job);
  ASSERT_TRUE(checkpoints.ok());
  ASSERT_EQ(checkpoints->size(), 1u);
  EXPECT_EQ((*checkpoints)[0].step(), 5);
  EXPECT_TRUE(attempt2->ReportProgress(Progress(job, 2, 0, 7)).ok());
  ExpectServing();
}

TEST_F(AuthIntegrationTest, OnlyTheOwnerOrAnAdminMayCancelOrReadCheckpoints) {
  auto [job, start] = StartJob(alice_.get(), TestJobSpec("alices"));
  ASSERT_TRUE(Client(start.rendezvous_secret())->ReportCheckpoint(Checkpoint(job, 1, 4)).ok());
  EXPECT_EQ(Job(job).owner(), "alice");
  const std::string before = Fingerprint(Job(job));
  const std::string owned =
      absl::StrCat("job ", job, " is owned by alice; only its owner or an ", "admin may ");
  ExpectStatus(bob_->CancelJob(job, "mine now"), absl::StatusCode::kPermissionDenied,
               owned + "cancel it");
  ExpectStatus(bob_->ListCheckpoints(job).status(), absl::StatusCode::kPermissionDenied,
               owned + "list its checkpoints");
  ExpectStatus(bob_->GetCheckpoint(job, 4).status(), absl::StatusCode::kPermissionDenied,
               owned + "read its checkpoints");
  EXPECT_EQ(Fingerprint(Job(job)), before);
  // Listing and watching stay open to every user.
  auto listed = bob_->ListJobs();
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].owner(), "alice");
  EXPECT_TRUE(bob_->GetJob(job).ok());
  int seen = 0;
  EXPECT_TRUE(bob_->WatchJob(job, [&](const JobStatus&) { return ++seen < 1; }).ok());
  EXPECT_EQ(seen, 1);
  // The owner reads them; an admin cancels.
  auto mine = alice_->ListCheckpoints(job);
  ASSERT_TRUE(mine.ok()) << mine.status();
  EXPECT_EQ(mine->size(), 1u);
  EXPECT_EQ(root_->GetCheckpoint(job, 4).status().code(), absl::StatusCode::kOk);
  ASSERT_TRUE(root_->CancelJob(job, "admin").ok());
  EXPECT_EQ(Job(job).state(), CANCELLED);
  // The owner cancels her own.
  auto own = alice_->SubmitJob(TestJobSpec("own"));
  ASSERT_TRUE(own.ok());
  EXPECT_TRUE(alice_->CancelJob(*own).ok());
  EXPECT_EQ(Job(*own).state(), CANCELLED);
  ExpectStatus(bob_->CancelJob("job-nope"), absl::StatusCode::kNotFound, "job-nope");
  ExpectServing();
}

TEST_F(AuthIntegrationTest, WhoAmINamesTheUserAdminAndCredentialKind) {
  auto alice = alice_->WhoAmI();
  ASSERT_TRUE(alice.ok()) << alice.status();
  EXPECT_EQ(alice->user(), "alice");
  EXPECT_FALSE(alice->admin());
  EXPECT_EQ(alice->credential(), "user token");
  auto root = root_->WhoAmI();
  ASSERT_TRUE(root.ok());
  EXPECT_EQ(root->user(), "root");
  EXPECT_TRUE(root->admin());
  auto join = join_->WhoAmI();
  ASSERT_TRUE(join.ok());
  EXPECT_EQ(join->credential(), "worker join token");
  EXPECT_EQ(join->user(), "");
  ExpectStatus(Client("guess")->WhoAmI().status(), absl::StatusCode::kUnauthenticated,
               "wrong token");
  ExpectStatus(Client("")->WhoAmI().status(), absl::StatusCode::kUnauthenticated,
               "missing \"authorization: Bearer <token>\" metadata");
  // The join token is no user's.
  ExpectStatus(join_->ListJobs().status(), absl::StatusCode::kUnauthenticated, "wrong user token");
}

TEST_F(AuthIntegrationTest, UsersFileReloadsAndABadEditKeepsTheOldUsers) {
  auto [job, start] = StartJob(alice_.get(), TestJobSpec("survives-reloads"));
  auto carol = Client("carol-token-0123456789");
  ExpectStatus(carol->WhoAmI().status(), absl::StatusCode::kUnauthenticated, "wrong token");
  // Carol added, bob removed, alice made an admin.
  WriteFile(users_file_, absl::StrCat("alice ", kAlice, " admin\nroot ", kRoot,
                                      " admin\ncarol carol-token-0123456789\n"));
  auto wait_for = [&](const std::function<bool()>& pred) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (absl::Now() < deadline && !pred()) absl::SleepFor(absl::Milliseconds(100));
    return pred();
  };
  ASSERT_TRUE(wait_for([&] { return carol->WhoAmI().ok(); }));
  EXPECT_EQ(carol->WhoAmI()->user(), "carol");
  EXPECT_TRUE(alice_->WhoAmI()->admin());
  ExpectStatus(bob_->ListJobs().status(), absl::StatusCode::kUnauthenticated, "wrong user token");
  ExpectStatus(carol->CancelJob(job), absl::StatusCode::kPermissionDenied,
               absl::StrCat("job ", job, " is owned by alice"));
  // A line that does not parse: the old users stay.
  WriteFile(users_file_, absl::StrCat("alice ", kAlice, " superuser\n"));
  absl::SleepFor(absl::Seconds(2));
  EXPECT_TRUE(carol->WhoAmI().ok());
  EXPECT_TRUE(alice_->WhoAmI()->admin());
  // A readable-by-others file: refused too.
  WriteFile(users_file_, absl::StrCat("bob ", kBob, "\n"), 0644);
  absl::SleepFor(absl::Seconds(2));
  EXPECT_TRUE(carol->WhoAmI().ok());
  EXPECT_FALSE(bob_->WhoAmI().ok());
  // Fixed: the new table is in place.
  WriteFile(users_file_, absl::StrCat("bob ", kBob, "\n"));
  ASSERT_TRUE(wait_for([&] { return bob_->WhoAmI().ok(); }));
  EXPECT_FALSE(carol->WhoAmI().ok());
  auto st = bob_->GetJob(job);  // root is gone too
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->state(), RUNNING);
}

TEST(AuthStartup, UsersFileWithOpenModeOrWithoutWorkerTokenIsRefused) {
  const std::string users = TestTmpPath("open.users");
  WriteFile(users, absl::StrCat("alice ", kAlice, "\n"), 0640);
  CoordinatorProcess::Options o;
  o.binary = CoordinatorBinaryPath();
  o.stderr_path = TestTmpPath("open.stderr");
  o.args = {"--listen=127.0.0.1:0", "--users_file=" + users,
            absl::StrCat("--worker_token=", kJoinToken)};
  auto p = CoordinatorProcess::Start(o);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("has mode 0640"), std::string::npos) << p.status();
  WriteFile(users, absl::StrCat("alice ", kAlice, "\n"), 0600);
  o.args = {"--listen=127.0.0.1:0", "--users_file=" + users};
  p = CoordinatorProcess::Start(o);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("--users_file needs --worker_token_file"), std::string::npos)
      << p.status();
}

TEST(AuthStartup, OffLoopbackTheWorkerTokenMustBeSetAndNoUsers) {
  CoordinatorProcess::Options o;
  o.binary = CoordinatorBinaryPath();
  o.stderr_path = TestTmpPath("shared.stderr");
  o.args = {"--listen=0.0.0.0:0", "--token=same-token", "--worker_token=same-token"};
  auto p = CoordinatorProcess::Start(o);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("--worker_token equals the token of user admin"),
            std::string::npos)
      << p.status();
  o.args = {"--listen=0.0.0.0:0", "--token=user-token"};
  p = CoordinatorProcess::Start(o);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("without a worker join token of its own"), std::string::npos)
      << p.status();
  o.args = {"--listen=0.0.0.0:0", "--token=user-token", "--worker_token=join-token"};
  p = CoordinatorProcess::Start(o);
  ASSERT_TRUE(p.ok()) << p.status();
}

}  // namespace
}  // namespace shardline::coordinator
