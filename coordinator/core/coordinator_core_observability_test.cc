// CoordinatorCore's logs and training metrics: ShipLogs / GetLogs, the training series of rank
// 0's reports, its batched durable write and the running jobs' gauges.
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/testing/fake_clock.h"
#include "coordinator/core/coordinator_core.h"
#include "gtest/gtest.h"

namespace shardline::coordinator {
namespace {

JobSpec Spec(int w) {
  JobSpec spec;
  spec.set_name("observed");
  spec.set_world_size(w);
  spec.mutable_fsdp()->set_sharding_strategy(FsdpSpec::FULL_SHARD);
  spec.mutable_train()->set_steps(100);
  return spec;
}

class CoreObservabilityTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(""); }
  void Start(const std::string& state_dir) {
    core_.reset();
    CoreOptions o;
    o.clock = &clock_;
    o.state_dir = state_dir;
    o.heartbeat_interval = absl::Seconds(1);
    o.heartbeat_timeout = absl::Seconds(5);
    o.metrics_flush_interval = absl::Seconds(5);
    auto core = CoordinatorCore::Create(o);
    ASSERT_TRUE(core.ok()) << core.status();
    core_ = std::move(*core);
  }
  // A RUNNING job of W ranks on one new worker (worker_).
  std::string RunningJob(int w) {
    RegisterWorkerRequest r;
    r.set_node_name(absl::StrCat("node-", ++nodes_));
    r.set_address("n:0");
    for (int i = 0; i < w; ++i) {
      Slot* s = r.add_slots();
      s->set_kind(Slot::CPU);
      s->set_index(i);
    }
    auto reg = core_->RegisterWorker(r);
    EXPECT_TRUE(reg.ok()) << reg.status();
    if (reg.ok()) worker_ = reg->worker_id();
    auto job = core_->SubmitJob(Spec(w));
    EXPECT_TRUE(job.ok()) << job.status();
    EXPECT_EQ(core_->GetJob(*job)->state(), RUNNING);
    return *job;
  }
  absl::Status Report(const std::string& job, int rank, int64_t step, double loss,
                      int64_t memory = 1000, double val_loss = NAN) {
    ProgressReport p;
    p.set_job_id(job);
    p.set_attempt(1);
    p.set_rank(rank);
    p.set_step(step);
    p.set_loss(loss);
    p.set_lr(0.01);
    p.set_tokens_per_s(500);
    p.set_mfu(0.25);
    p.set_step_time_s(0.5);
    p.set_peak_memory_bytes(memory);
    p.set_val_loss(val_loss);
    return core_->ReportProgress(p);
  }
  RankLogChunk Chunk(const std::string& job, int attempt, int rank,
                     std::vector<std::string> lines) {
    RankLogChunk c;
    c.set_job_id(job);
    c.set_attempt(attempt);
    c.set_rank(rank);
    c.set_time_unix_ms(absl::ToUnixMillis(clock_.Now()));
    for (auto& l : lines) c.add_lines(std::move(l));
    return c;
  }

  FakeClock clock_;
  std::unique_ptr<CoordinatorCore> core_;
  int nodes_ = 0;
  std::string worker_;  // the worker RunningJob registered last
};

TEST_F(CoreObservabilityTest, RankZeroReportsBuildTheSeriesWithTheRanksHighestMemory) {
  const std::string job = RunningJob(2);
  ASSERT_TRUE(Report(job, 1, 1, 9.0, /*memory=*/5000).ok());  // rank 1: memory only
  ASSERT_TRUE(Report(job, 0, 1, 3.0).ok());
  ASSERT_TRUE(Report(job, 0, 2, 2.5, 1000, /*val_loss=*/2.75).ok());
  GetJobMetricsRequest req;
  req.set_job_id(job);
  auto m = core_->GetJobMetrics(req);
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->points_size(), 2);
  EXPECT_EQ(m->points(0).step(), 1);
  EXPECT_DOUBLE_EQ(m->points(0).loss(), 3.0);
  EXPECT_EQ(m->points(0).peak_memory_bytes(), 5000);
  EXPECT_TRUE(std::isnan(m->points(0).val_loss()));
  EXPECT_DOUBLE_EQ(m->points(1).val_loss(), 2.75);
  EXPECT_DOUBLE_EQ(m->points(1).mfu(), 0.25);
  EXPECT_EQ(m->latest().step(), 2);
  EXPECT_EQ(m->reported_steps(), 2);
  EXPECT_EQ(m->state(), RUNNING);
  EXPECT_EQ(m->total_steps(), 100);
  EXPECT_EQ(m->per_rank_peak_memory_bytes_size(), 2);
  req.set_after_step(1);
  EXPECT_EQ(core_->GetJobMetrics(req)->points_size(), 1);
  req.set_job_id("job-nope");
  EXPECT_EQ(core_->GetJobMetrics(req).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(CoreObservabilityTest, TheSeriesIsWrittenInBatchesAndSurvivesARestart) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/series_restart";
  std::filesystem::remove_all(dir);
  Start(dir);
  const std::string job = RunningJob(1);
  auto stored_points = [&]() -> int {
    auto store = StateStore::Open(dir);  // a second connection reads what is committed
    EXPECT_TRUE(store.ok());
    auto rows = (*store)->LoadJobMetrics();
    EXPECT_TRUE(rows.ok());
    return rows->empty() ? 0 : (*rows)[0].points_size();
  };
  auto wait_for_points = [&](int n) {
    for (int i = 0; i < 500 && stored_points() != n; ++i) absl::SleepFor(absl::Milliseconds(10));
    return stored_points();
  };
  ASSERT_TRUE(Report(job, 0, 1, 3.0).ok());
  core_->Tick();  // the first write of a series is due at once
  EXPECT_EQ(wait_for_points(1), 1);
  for (int step = 2; step <= 4; ++step) ASSERT_TRUE(Report(job, 0, step, 3.0 - step * 0.1).ok());
  core_->Tick();
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_EQ(stored_points(), 1);  // three reports, no write: the interval has not passed
  clock_.Advance(absl::Seconds(5));
  core_->Tick();
  EXPECT_EQ(wait_for_points(4), 4);  // one write for the three
  ASSERT_TRUE(Report(job, 0, 5, 2.0).ok());
  Start(dir);  // a clean shutdown writes what is dirty
  GetJobMetricsRequest req;
  req.set_job_id(job);
  auto m = core_->GetJobMetrics(req);
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->points_size(), 5);
  EXPECT_DOUBLE_EQ(m->points(3).loss(), 2.6);
  EXPECT_EQ(m->latest().step(), 5);
}

// Issue #30: a SIGKILL (here: the state directory copied while the core runs) loses the points
// since the last durable write; the durable step tells the daemons which reports to keep, and
// their resent reports fill the restored series without a second point for any step.
TEST_F(CoreObservabilityTest, ReportsAnswerTheDurableStepAndResentReportsFillTheSeries) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/series_durable";
  const std::string crashed = dir + "_crashed";
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(crashed);
  Start(dir);
  const std::string job = RunningJob(1);
  auto report = [&](int64_t step) -> int64_t {
    ProgressReport p;
    p.set_job_id(job);
    p.set_attempt(1);
    p.set_rank(0);
    p.set_step(step);
    p.set_loss(10.0 - static_cast<double>(step));
    p.set_val_loss(NAN);
    ReportProgressResponse resp;
    absl::Status s = core_->ReportProgress(p, &resp);
    EXPECT_TRUE(s.ok()) << s;
    return resp.durable_step();
  };
  EXPECT_EQ(report(1), 0);
  core_->Tick();  // the first write is due at once
  int64_t durable = 0;
  for (int i = 0; i < 500 && (durable = report(1)) != 1; ++i)
    absl::SleepFor(absl::Milliseconds(10));
  EXPECT_EQ(durable, 1);
  for (int64_t step = 2; step <= 4; ++step) EXPECT_EQ(report(step), 1);  // not written yet
  std::filesystem::copy(dir, crashed);  // what a SIGKILL now would leave
  Start(crashed);
  // The daemon sends 2..4 again (and 1, which changes nothing).
  for (int64_t step = 1; step <= 4; ++step) EXPECT_EQ(report(step), 1);
  EXPECT_EQ(report(5), 1);
  GetJobMetricsRequest req;
  req.set_job_id(job);
  auto m = core_->GetJobMetrics(req);
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->points_size(), 5);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(m->points(i).step(), i + 1);
    EXPECT_EQ(m->points(i).count(), 1);
    EXPECT_DOUBLE_EQ(m->points(i).loss(), 9.0 - i);
  }
  EXPECT_EQ(core_->GetJob(job)->step(), 5);
  clock_.Advance(absl::Seconds(5));
  core_->Tick();
  for (int i = 0; i < 500 && (durable = report(5)) != 5; ++i)
    absl::SleepFor(absl::Milliseconds(10));
  EXPECT_EQ(durable, 5);
}

TEST_F(CoreObservabilityTest, ShipLogsTakesGoodChunksAndNamesTheBadOnes) {
  const std::string job = RunningJob(2);
  ShipLogsRequest req;
  req.set_worker_id(worker_);
  *req.add_chunks() = Chunk(job, 1, 0, {"hello", "world"});
  *req.add_chunks() = Chunk("job-nope", 1, 0, {"lost"});
  *req.add_chunks() = Chunk(job, 1, 1, {"from rank 1"});
  absl::Status s = core_->ShipLogs(req);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "unknown job job-nope");
  req.clear_chunks();
  *req.add_chunks() = Chunk(job, 2, 0, {"future"});
  s = core_->ShipLogs(req);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), absl::StrCat("logs of job ", job,
                                      ": attempt 2 has not started (the job is at attempt 1)"));
  req.clear_chunks();
  *req.add_chunks() = Chunk(job, 1, 2, {"outside"});
  s = core_->ShipLogs(req);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), absl::StrCat("logs of job ", job, ": rank 2 outside world of 2"));

  GetLogsRequest get;
  get.set_job_id(job);
  get.set_rank(-1);  // every rank
  auto logs = core_->GetLogs(get);
  ASSERT_TRUE(logs.ok()) << logs.status();
  ASSERT_EQ(logs->lines_size(), 3);
  EXPECT_EQ(logs->lines(2).text(), "from rank 1");
  EXPECT_FALSE(logs->job_finished());

  // After the job ended: the last lines are still taken and everything stays readable.
  ASSERT_TRUE(core_->CancelJob(job, "done").ok());
  req.clear_chunks();
  *req.add_chunks() = Chunk(job, 1, 0, {"last words"});
  EXPECT_TRUE(core_->ShipLogs(req).ok());
  logs = core_->GetLogs(get);
  ASSERT_TRUE(logs.ok());
  EXPECT_EQ(logs->lines_size(), 4);
  EXPECT_TRUE(logs->job_finished());
}

TEST_F(CoreObservabilityTest, ShipLogsRefusesRanksNotPlacedOnTheCallingWorker) {
  const std::string victim = RunningJob(2);
  const std::string victim_worker = worker_;
  const std::string own = RunningJob(1);  // on a second worker
  GetLogsRequest get;
  get.set_job_id(victim);
  get.set_rank(-1);
  ShipLogsRequest req;
  req.set_worker_id(worker_);
  *req.add_chunks() = Chunk(victim, 1, 1, {"forged: loss 0.0"});
  absl::Status s = core_->ShipLogs(req);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(s.message(),
            absl::StrCat("worker ", worker_, " may not ship logs of job ", victim,
                         " attempt 1 rank 1: that rank is not placed on it (in the running "
                         "attempt or the last one that ended)"));
  EXPECT_EQ(core_->GetLogs(get)->lines_size(), 0);
  // Its own rank's lines in the same call still land; the refused chunk adds nothing.
  *req.add_chunks() = Chunk(own, 1, 0, {"mine"});
  EXPECT_EQ(core_->ShipLogs(req).code(), absl::StatusCode::kPermissionDenied);
  get.set_job_id(own);
  EXPECT_EQ(core_->GetLogs(get)->lines_size(), 1);
  // A worker id nobody registered (the credential check lets unknown ids through) speaks for
  // no rank either.
  req.set_worker_id("w-made-up");
  req.clear_chunks();
  *req.add_chunks() = Chunk(victim, 1, 0, {"forged"});
  EXPECT_EQ(core_->ShipLogs(req).code(), absl::StatusCode::kPermissionDenied);
  // After the victim's attempt ended its own worker's late lines land, the other's still not.
  ASSERT_TRUE(core_->CancelJob(victim, "done").ok());
  req.set_worker_id(worker_);
  EXPECT_EQ(core_->ShipLogs(req).code(), absl::StatusCode::kPermissionDenied);
  req.set_worker_id(victim_worker);
  EXPECT_TRUE(core_->ShipLogs(req).ok());
  get.set_job_id(victim);
  auto logs = core_->GetLogs(get);
  ASSERT_TRUE(logs.ok()) << logs.status();
  ASSERT_EQ(logs->lines_size(), 1);
  EXPECT_EQ(logs->lines(0).text(), "forged");  // sent by the rank's own worker this time
}

TEST_F(CoreObservabilityTest, GetLogsRefusesUnknownJobsAndNegativeArguments) {
  const std::string job = RunningJob(1);
  GetLogsRequest get;
  get.set_job_id("job-nope");
  EXPECT_EQ(core_->GetLogs(get).status().code(), absl::StatusCode::kNotFound);
  get.set_job_id(job);
  get.set_tail_lines(-1);
  const auto r = core_->GetLogs(get);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            "logs: tail_lines and rank must not be negative, got tail_lines -1, rank 0");
}

TEST_F(CoreObservabilityTest, GetLogsOfARankOutsideTheWorldNamesTheRanks) {
  const std::string job = RunningJob(2);
  GetLogsRequest get;
  get.set_job_id(job);
  get.set_rank(7);
  const auto r = core_->GetLogs(get);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), absl::StrCat("logs: job ", job, " has no rank 7 (ranks 0..1)"));
  get.set_rank(1);
  EXPECT_TRUE(core_->GetLogs(get).ok());
  get.set_rank(7);
  get.set_all_ranks(true);  // the rank field is not looked at
  EXPECT_TRUE(core_->GetLogs(get).ok());
}

TEST_F(CoreObservabilityTest, RunningJobsCarryTheirLatestReportAndEndedOnesLeave) {
  const std::string job = RunningJob(1);
  ASSERT_EQ(core_->RunningJobs().size(), 1u);
  EXPECT_EQ(core_->RunningJobs()[0].latest.count(), 0);  // no report yet
  ASSERT_TRUE(Report(job, 0, 7, 1.5).ok());
  const std::vector<CoordinatorCore::RunningJobMetrics> running = core_->RunningJobs();
  ASSERT_EQ(running.size(), 1u);
  EXPECT_EQ(running[0].job_id, job);
  EXPECT_EQ(running[0].name, "observed");
  EXPECT_EQ(running[0].step, 7);
  EXPECT_DOUBLE_EQ(running[0].latest.loss(), 1.5);
  EXPECT_DOUBLE_EQ(running[0].eta_s, 0.5 * 93);
  ASSERT_TRUE(core_->CancelJob(job, "done").ok());
  EXPECT_TRUE(core_->RunningJobs().empty());
}

}  // namespace
}  // namespace shardline::coordinator
