// WorkerDaemon against an in-process fake coordinator (a real gRPC server on loopback): the
// assignments it is sent and the heartbeats it answers with. The "trainer" is a shell script
// that prints its environment's RANK and SHARDLINE_RANK_GENERATION and then sleeps.
#include "worker/worker_daemon.h"

#include <signal.h>
#include <sys/stat.h>

#include <atomic>
#include <deque>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "proto/coordinator.grpc.pb.h"

namespace shardline::worker {
namespace {

namespace fs = std::filesystem;

// Takes the daemon's registration, heartbeats, log lines and progress, and streams to it the
// assignments the test pushes.
class FakeCoordinator final : public Coordinator::Service {
 public:
  grpc::Status RegisterWorker(grpc::ServerContext*, const RegisterWorkerRequest*,
                              RegisterWorkerResponse* resp) override {
    resp->set_worker_id("w-1");
    resp->set_worker_credential("cred");
    resp->set_heartbeat_interval_ms(heartbeat_interval_ms_.load());
    return grpc::Status::OK;
  }
  grpc::Status Heartbeat(grpc::ServerContext*, const HeartbeatRequest* req,
                         HeartbeatResponse*) override {
    absl::MutexLock lock(&mu_);
    last_heartbeat_ = *req;
    ++heartbeats_;
    return grpc::Status::OK;
  }
  grpc::Status StreamAssignments(grpc::ServerContext* ctx, const StreamAssignmentsRequest*,
                                 grpc::ServerWriter<Assignment>* writer) override {
    while (!ctx->IsCancelled()) {
      std::optional<Assignment> next;
      {
        absl::MutexLock lock(&mu_);
        streaming_ = true;
        if (stopping_) return grpc::Status::OK;
        if (!queue_.empty()) {
          next = queue_.front();
          queue_.pop_front();
        }
      }
      if (!next.has_value()) {
        absl::SleepFor(absl::Milliseconds(20));
      } else if (!writer->Write(*next)) {
        return grpc::Status::OK;
      }
    }
    return grpc::Status::OK;
  }
  grpc::Status ShipLogs(grpc::ServerContext*, const ShipLogsRequest* req,
                        ShipLogsResponse*) override {
    absl::MutexLock lock(&mu_);
    for (const RankLogChunk& c : req->chunks()) {
      for (const std::string& l : c.lines()) shipped_.push_back({c.rank(), l});
    }
    return grpc::Status::OK;
  }
  grpc::Status ReportProgress(grpc::ServerContext*, const ProgressReport*,
                              ReportProgressResponse*) override {
    return grpc::Status::OK;
  }

  // The interval the next registration hands out (before the daemon registers).
  void SetHeartbeatIntervalMs(int ms) { heartbeat_interval_ms_.store(ms); }

  void Push(const Assignment& a) {
    absl::MutexLock lock(&mu_);
    queue_.push_back(a);
  }
  void Stop() {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  bool Streaming() {
    absl::MutexLock lock(&mu_);
    return streaming_;
  }

  // Waits up to `timeout` for a heartbeat, sent after this call, that `pred` accepts.
  bool WaitForHeartbeat(const std::function<bool(const HeartbeatRequest&)>& pred,
                        absl::Duration timeout = absl::Seconds(20)) {
    int seen;
    {
      absl::MutexLock lock(&mu_);
      seen = heartbeats_;
    }
    for (absl::Time end = absl::Now() + timeout; absl::Now() < end;) {
      {
        absl::MutexLock lock(&mu_);
        if (heartbeats_ > seen && pred(last_heartbeat_)) return true;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    return false;
  }
  int HeartbeatCount() {
    absl::MutexLock lock(&mu_);
    return heartbeats_;
  }
  HeartbeatRequest LastHeartbeat() {
    absl::MutexLock lock(&mu_);
    return last_heartbeat_;
  }
  // Log lines shipped for `rank` that contain `text`.
  int ShippedLinesWith(int rank, const std::string& text) {
    absl::MutexLock lock(&mu_);
    int n = 0;
    for (const auto& [r, line] : shipped_) n += r == rank && absl::StrContains(line, text);
    return n;
  }

 private:
  std::atomic<int> heartbeat_interval_ms_{100};
  absl::Mutex mu_;
  std::deque<Assignment> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool streaming_ ABSL_GUARDED_BY(mu_) = false;
  HeartbeatRequest last_heartbeat_ ABSL_GUARDED_BY(mu_);
  int heartbeats_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::pair<int, std::string>> shipped_ ABSL_GUARDED_BY(mu_);
};

// The statuses of `rank` of job-1 attempt 1 in a heartbeat.
std::vector<RankStatus> StatusesOf(const HeartbeatRequest& hb, int rank) {
  std::vector<RankStatus> out;
  for (const RankStatus& rs : hb.ranks()) {
    if (rs.job_id() == "job-1" && rs.attempt() == 1 && rs.rank() == rank) out.push_back(rs);
  }
  return out;
}

// True when the heartbeat has exactly one status of `rank`, of `generation`, in `state`.
bool HasOnly(const HeartbeatRequest& hb, int rank, int generation, RankStatus::State state) {
  const std::vector<RankStatus> s = StatusesOf(hb, rank);
  return s.size() == 1 && s[0].generation() == generation && s[0].state() == state;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Waits until `path` contains `text`.
bool WaitForFileWith(const std::string& path, const std::string& text,
                     absl::Duration timeout = absl::Seconds(20)) {
  for (absl::Time end = absl::Now() + timeout; absl::Now() < end;) {
    if (absl::StrContains(ReadFile(path), text)) return true;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return false;
}

// The pid a trainer script printed into its log ("pid=N").
pid_t PidIn(const std::string& log) {
  const size_t at = log.find("pid=");
  if (at == std::string::npos) return -1;
  return static_cast<pid_t>(std::stol(log.substr(at + 4)));
}

bool Alive(pid_t pid) { return pid > 0 && kill(pid, 0) == 0; }

class WorkerDaemonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    root_ = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/worker_daemon_test_",
                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
    trainer_ = root_ + "/trainer.sh";
    {
      std::ofstream out(trainer_);
      // exec: the pid printed is the one the daemon supervises and signals.
      out << "#!/bin/sh\n"
             "echo \"rank=$RANK generation=$SHARDLINE_RANK_GENERATION pid=$$ args=$*\"\n"
             "exec sleep 600\n";
    }
    chmod(trainer_.c_str(), 0755);

    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&fake_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);

    WorkerOptions o;
    o.coordinator_address = absl::StrCat("127.0.0.1:", port);
    o.node_name = "node-a";
    o.advertise_address = "127.0.0.1";
    o.cpu_slots = 2;
    o.work_dir = root_ + "/work";
    o.trainer_path = trainer_;
    o.grace_period = absl::Seconds(1);
    absl::StatusOr<std::unique_ptr<WorkerDaemon>> daemon = WorkerDaemon::Create(o);
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    daemon_ = *std::move(daemon);
    run_ = std::thread([this] { run_status_ = daemon_->Run(); });
    for (absl::Time end = absl::Now() + absl::Seconds(20); absl::Now() < end && !fake_.Streaming();)
      absl::SleepFor(absl::Milliseconds(20));
    ASSERT_TRUE(fake_.Streaming());
    attempt_dir_ = o.work_dir + "/jobs/job-1/attempt-1";
  }

  void TearDown() override {
    if (daemon_ != nullptr) daemon_->Shutdown();
    fake_.Stop();
    if (run_.joinable()) run_.join();
    EXPECT_TRUE(run_status_.ok()) << run_status_;
    if (server_ != nullptr) server_->Shutdown();
  }

  Assignment Start(int rank, int generation) {
    Assignment a;
    a.set_action(Assignment::START);
    a.set_job_id("job-1");
    a.set_attempt(1);
    a.set_rank(rank);
    a.set_world_size(2);
    a.set_local_rank(rank);
    a.set_local_world_size(2);
    a.set_slot_index(rank);
    a.set_rendezvous_namespace("job-1/1");
    a.set_rendezvous_secret("secret");
    a.set_generation(generation);
    a.set_grace_period_s(1);
    a.mutable_spec()->set_name("t");
    a.mutable_spec()->set_world_size(2);
    a.mutable_spec()->mutable_device()->set_kind(DeviceSpec::CPU);
    return a;
  }
  Assignment StopRank(int rank, int generation) {
    Assignment a = Start(rank, generation);
    a.set_action(Assignment::STOP_RANK);
    a.clear_spec();
    return a;
  }
  std::string Log(int rank, int generation) const {
    return generation == 0 ? absl::StrCat(attempt_dir_, "/rank-", rank, ".log")
                           : absl::StrCat(attempt_dir_, "/rank-", rank, ".gen", generation, ".log");
  }

  FakeCoordinator fake_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<WorkerDaemon> daemon_;
  std::thread run_;
  absl::Status run_status_;
  std::string root_;
  std::string trainer_;
  std::string attempt_dir_;
};

TEST_F(WorkerDaemonTest, ReplacementGenerationStartsAfterTheFirstExitedWithItsOwnFiles) {
  fake_.Push(Start(0, 0));
  fake_.Push(Start(1, 0));
  ASSERT_TRUE(WaitForFileWith(Log(1, 0), "pid="));
  ASSERT_TRUE(WaitForFileWith(Log(0, 0), "rank=0 generation=0 "));
  EXPECT_TRUE(
      absl::StrContains(ReadFile(Log(1, 0)), "--spec=" + attempt_dir_ + "/spec-rank-1.yaml"))
      << ReadFile(Log(1, 0));
  const pid_t rank0 = PidIn(ReadFile(Log(0, 0)));
  const pid_t first = PidIn(ReadFile(Log(1, 0)));
  ASSERT_TRUE(Alive(first));
  ASSERT_TRUE(fake_.WaitForHeartbeat([](const HeartbeatRequest& hb) {
    return HasOnly(hb, 1, 0, RankStatus::RUNNING) && HasOnly(hb, 0, 0, RankStatus::RUNNING);
  }));

  // The first process of rank 1 dies; its exit is reported as generation 0's.
  ASSERT_EQ(kill(first, SIGKILL), 0);
  ASSERT_TRUE(fake_.WaitForHeartbeat([](const HeartbeatRequest& hb) {
    return HasOnly(hb, 1, 0, RankStatus::EXITED);
  })) << fake_.LastHeartbeat().DebugString();
  EXPECT_EQ(StatusesOf(fake_.LastHeartbeat(), 1)[0].exit_code(), -SIGKILL);

  // The replacement: generation 1, its own log, spec and metrics; the first one's log is kept.
  fake_.Push(Start(1, 1));
  ASSERT_TRUE(WaitForFileWith(Log(1, 1), "rank=1 generation=1 "));
  const std::string log1 = ReadFile(Log(1, 1));
  EXPECT_TRUE(absl::StrContains(log1, "--spec=" + attempt_dir_ + "/spec-rank-1.gen1.yaml")) << log1;
  EXPECT_TRUE(
      absl::StrContains(log1, "--metrics_out=" + attempt_dir_ + "/metrics-rank-1.gen1.jsonl"))
      << log1;
  EXPECT_TRUE(absl::StrContains(ReadFile(Log(1, 0)), "generation=0"));
  const pid_t second = PidIn(log1);
  EXPECT_NE(second, first);
  EXPECT_TRUE(Alive(second));
  // Heartbeats now carry generation 1 only for rank 1; rank 0 is untouched.
  ASSERT_TRUE(fake_.WaitForHeartbeat([](const HeartbeatRequest& hb) {
    return HasOnly(hb, 1, 1, RankStatus::RUNNING) && HasOnly(hb, 0, 0, RankStatus::RUNNING);
  })) << fake_.LastHeartbeat().DebugString();
  EXPECT_EQ(PidIn(ReadFile(Log(0, 0))), rank0);
  EXPECT_TRUE(Alive(rank0));
  // Both generations' lines ship as rank 1.
  for (absl::Time end = absl::Now() + absl::Seconds(10);
       absl::Now() < end && fake_.ShippedLinesWith(1, "generation=1") == 0;) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(fake_.ShippedLinesWith(1, "generation=0"), 1);
  EXPECT_EQ(fake_.ShippedLinesWith(1, "generation=1"), 1);
}

TEST_F(WorkerDaemonTest, RepeatedOrOlderStartOfARankIsIgnored) {
  fake_.Push(Start(0, 1));
  ASSERT_TRUE(WaitForFileWith(Log(0, 1), "generation=1 "));
  const pid_t pid = PidIn(ReadFile(Log(0, 1)));
  fake_.Push(Start(0, 1));  // a repeat (a stream that broke and came back)
  fake_.Push(Start(0, 0));  // an older generation
  // The stream is served in order: a marker START after them has run once they were handled.
  fake_.Push(Start(1, 0));
  ASSERT_TRUE(WaitForFileWith(Log(1, 0), "generation=0 "));
  ASSERT_TRUE(fake_.WaitForHeartbeat([](const HeartbeatRequest& hb) {
    return HasOnly(hb, 0, 1, RankStatus::RUNNING) && HasOnly(hb, 1, 0, RankStatus::RUNNING);
  })) << fake_.LastHeartbeat().DebugString();
  EXPECT_TRUE(Alive(pid));
  EXPECT_EQ(PidIn(ReadFile(Log(0, 1))), pid);  // not restarted: its log was not truncated
  EXPECT_FALSE(fs::exists(Log(0, 0)));
}

TEST_F(WorkerDaemonTest, NewerGenerationStopsTheOlderOneStillRunningFirst) {
  fake_.Push(Start(0, 0));
  ASSERT_TRUE(WaitForFileWith(Log(0, 0), "pid="));
  const pid_t first = PidIn(ReadFile(Log(0, 0)));
  fake_.Push(Start(0, 2));
  ASSERT_TRUE(WaitForFileWith(Log(0, 2), "generation=2 "));
  // The older process was stopped (and reaped) before the new one started.
  EXPECT_FALSE(Alive(first));
  EXPECT_TRUE(Alive(PidIn(ReadFile(Log(0, 2)))));
  ASSERT_TRUE(fake_.WaitForHeartbeat([](const HeartbeatRequest& hb) {
    return HasOnly(hb, 0, 2, RankStatus::RUNNING);
  })) << fake_.LastHeartbeat().DebugString();
}

TEST_F(WorkerDaemonTest, StopRankStopsOnlyThatRankAndOnlyUpToItsGeneration) {
  fake_.Push(Start(0, 0));
  fake_.Push(Start(1, 1));
  ASSERT_TRUE(WaitForFileWith(Log(0, 0), "pid="));
  ASSERT_TRUE(WaitForFileWith(Log(1, 1), "pid="));
  const pid_t rank0 = PidIn(ReadFile(Log(0, 0)));
  const pid_t rank1 = PidIn(ReadFile(Log(1, 1)));

  // A STOP_RANK for an older generation than the one running leaves it alone.
  fake_.Push(StopRank(1, 0));
  // SIGTERM ends the script's sleep: the rank exits by SIGTERM within the grace period.
  fake_.Push(StopRank(0, 0));
  ASSERT_TRUE(fake_.WaitForHeartbeat([](const HeartbeatRequest& hb) {
    return HasOnly(hb, 0, 0, RankStatus::EXITED);
  })) << fake_.LastHeartbeat().DebugString();
  EXPECT_FALSE(Alive(rank0));
  EXPECT_EQ(StatusesOf(fake_.LastHeartbeat(), 0)[0].exit_code(), -SIGTERM);
  EXPECT_TRUE(Alive(rank1));
  EXPECT_TRUE(HasOnly(fake_.LastHeartbeat(), 1, 1, RankStatus::RUNNING));

  // A stopped rank that ignores SIGTERM (here: SIGSTOPped, as a stalled rank) gets SIGKILL
  // after the grace period.
  ASSERT_EQ(kill(rank1, SIGSTOP), 0);
  fake_.Push(StopRank(1, 1));
  ASSERT_TRUE(fake_.WaitForHeartbeat([](const HeartbeatRequest& hb) {
    return HasOnly(hb, 1, 1, RankStatus::EXITED);
  })) << fake_.LastHeartbeat().DebugString();
  EXPECT_EQ(StatusesOf(fake_.LastHeartbeat(), 1)[0].exit_code(), -SIGKILL);
  EXPECT_FALSE(Alive(rank1));
}

// Stops never wait for each other: the stream thread only signals, the stop thread SIGKILLs at
// each rank's deadline. Two STOP_RANKs of ranks that hold out (SIGSTOPped: SIGTERM stays
// pending) both end one grace period after they were sent. (The second used to wait on the
// stream until the first's SIGKILL: two grace periods; a cancel behind another STOP did too.)
TEST_F(WorkerDaemonTest, StopsOfRanksHoldingOutEndAllWithinOneGracePeriod) {
  constexpr int kGraceS = 2;
  fake_.Push(Start(0, 0));
  fake_.Push(Start(1, 0));
  ASSERT_TRUE(WaitForFileWith(Log(0, 0), "pid="));
  ASSERT_TRUE(WaitForFileWith(Log(1, 0), "pid="));
  const pid_t rank0 = PidIn(ReadFile(Log(0, 0)));
  const pid_t rank1 = PidIn(ReadFile(Log(1, 0)));
  ASSERT_EQ(kill(rank0, SIGSTOP), 0);
  ASSERT_EQ(kill(rank1, SIGSTOP), 0);
  const absl::Time sent = absl::Now();
  for (int rank : {0, 1}) {
    Assignment stop = StopRank(rank, 0);
    stop.set_grace_period_s(kGraceS);
    fake_.Push(stop);
  }
  absl::Time rank0_gone = absl::InfiniteFuture(), rank1_gone = absl::InfiniteFuture();
  for (absl::Time end = sent + absl::Seconds(20);
       absl::Now() < end &&
       (rank0_gone == absl::InfiniteFuture() || rank1_gone == absl::InfiniteFuture());) {
    // Alive (kill 0) holds for a zombie: gone means reaped by the daemon.
    if (rank0_gone == absl::InfiniteFuture() && !Alive(rank0)) rank0_gone = absl::Now();
    if (rank1_gone == absl::InfiniteFuture() && !Alive(rank1)) rank1_gone = absl::Now();
    absl::SleepFor(absl::Milliseconds(10));
  }
  for (absl::Time gone : {rank0_gone, rank1_gone}) {
    EXPECT_GE(gone - sent, absl::Seconds(kGraceS) - absl::Milliseconds(100));  // the grace
    EXPECT_LT(gone - sent, absl::Seconds(kGraceS) + absl::Seconds(1));         // not two of them
  }
  ASSERT_TRUE(fake_.WaitForHeartbeat([](const HeartbeatRequest& hb) {
    return HasOnly(hb, 0, 0, RankStatus::EXITED) && HasOnly(hb, 1, 0, RankStatus::EXITED);
  })) << fake_.LastHeartbeat().DebugString();
  EXPECT_EQ(StatusesOf(fake_.LastHeartbeat(), 0)[0].exit_code(), -SIGKILL);
  EXPECT_EQ(StatusesOf(fake_.LastHeartbeat(), 1)[0].exit_code(), -SIGKILL);
}

// A rank's exit goes out in a heartbeat at once, not at the next interval: with a 30 s interval
// the coordinator still hears of a killed rank within seconds (for a restart, or a replica
// group's ABORT vote, docs/failures.md).
class WorkerDaemonSlowHeartbeatTest : public WorkerDaemonTest {
 protected:
  void SetUp() override {
    fake_.SetHeartbeatIntervalMs(30000);
    WorkerDaemonTest::SetUp();
  }
};

TEST_F(WorkerDaemonSlowHeartbeatTest, AnExitIsHeartbeatAtOnce) {
  // The first registered heartbeat (at once, or after the 1 s the loop waits when it started
  // before the registration): the next one is due 30 s after it.
  for (absl::Time end = absl::Now() + absl::Seconds(20);
       absl::Now() < end && fake_.HeartbeatCount() == 0;) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_GT(fake_.HeartbeatCount(), 0);
  fake_.Push(Start(0, 0));
  ASSERT_TRUE(WaitForFileWith(Log(0, 0), "pid="));
  const pid_t pid = PidIn(ReadFile(Log(0, 0)));
  ASSERT_TRUE(Alive(pid));
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  // Within 10 s, far before the next periodic heartbeat (whether or not it went out before this
  // line runs).
  for (absl::Time end = absl::Now() + absl::Seconds(10);
       absl::Now() < end && !HasOnly(fake_.LastHeartbeat(), 0, 0, RankStatus::EXITED);) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_TRUE(HasOnly(fake_.LastHeartbeat(), 0, 0, RankStatus::EXITED))
      << fake_.LastHeartbeat().DebugString();
  EXPECT_EQ(StatusesOf(fake_.LastHeartbeat(), 0)[0].exit_code(), -SIGKILL);
}

}  // namespace
}  // namespace shardline::worker
