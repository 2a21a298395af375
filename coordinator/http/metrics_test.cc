// CoordinatorMetrics: the /metrics text of a core and of the RPCs observed, through prometheus-cpp.
#include "coordinator/http/metrics.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/testing/fake_clock.h"
#include "coordinator/core/coordinator_core.h"
#include "gtest/gtest.h"

namespace shardline::coordinator {
namespace {

bool Has(const std::string& text, const std::string& line) {
  return text.find(line) != std::string::npos;
}

class CoordinatorMetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CoreOptions o;
    o.clock = &clock_;
    o.heartbeat_interval = absl::Seconds(1);
    o.heartbeat_timeout = absl::Seconds(5);
    auto core = CoordinatorCore::Create(o);
    ASSERT_TRUE(core.ok()) << core.status();
    core_ = std::move(*core);
  }
  // A RUNNING job of 2 ranks on a new worker, rank 0 of which reported one step.
  std::string RunningJob(const std::string& name) {
    RegisterWorkerRequest r;
    r.set_node_name(absl::StrCat("node-", name));
    r.set_address("n:0");
    for (int i = 0; i < 2; ++i) {
      Slot* s = r.add_slots();
      s->set_kind(Slot::CPU);
      s->set_index(i);
    }
    EXPECT_TRUE(core_->RegisterWorker(r).ok());
    JobSpec spec;
    spec.set_name(name);
    spec.set_world_size(2);
    spec.mutable_fsdp()->set_sharding_strategy(FsdpSpec::FULL_SHARD);
    spec.mutable_train()->set_steps(100);
    auto job = core_->SubmitJob(spec);
    EXPECT_TRUE(job.ok()) << job.status();
    for (int rank = 0; rank < 2; ++rank) {
      ProgressReport p;
      p.set_job_id(*job);
      p.set_attempt(1);
      p.set_rank(rank);
      p.set_step(7);
      p.set_loss(2.5);
      p.set_tokens_per_s(500);
      p.set_mfu(0.25);
      p.set_step_time_s(0.5);
      p.set_peak_memory_bytes(1000 + rank);
      EXPECT_TRUE(core_->ReportProgress(p).ok());
    }
    return *job;
  }

  FakeClock clock_;
  std::unique_ptr<CoordinatorCore> core_;
  CoordinatorMetrics metrics_;
};

TEST_F(CoordinatorMetricsTest, RendersTheCoreWithHelpAndType) {
  const std::string job = RunningJob("observed");
  const std::string text = metrics_.Render(*core_);
  EXPECT_TRUE(Has(text, "# HELP shardline_jobs Jobs by state.\n# TYPE shardline_jobs gauge\n"))
      << text;
  EXPECT_TRUE(Has(text, "shardline_jobs{state=\"RUNNING\"} 1\n")) << text;
  EXPECT_TRUE(Has(text, "shardline_jobs{state=\"CANCELLED\"} 0\n")) << text;
  EXPECT_TRUE(Has(text, "shardline_workers{state=\"ALIVE\"} 1\n")) << text;
  EXPECT_TRUE(Has(text, "# TYPE shardline_attempts_started_total counter\n")) << text;
  EXPECT_TRUE(Has(text, "shardline_attempts_started_total 1\n")) << text;
  EXPECT_TRUE(Has(text, "# TYPE shardline_job_loss gauge\n")) << text;
  EXPECT_TRUE(
      Has(text, absl::StrCat("shardline_job_step{job=\"", job, "\",name=\"observed\"} 7\n")))
      << text;
  EXPECT_TRUE(
      Has(text, absl::StrCat("shardline_job_loss{job=\"", job, "\",name=\"observed\"} 2.5\n")))
      << text;
  EXPECT_TRUE(Has(
      text, absl::StrCat("shardline_job_peak_memory_bytes{job=\"", job, "\",rank=\"1\"} 1001\n")))
      << text;
  // A second scrape reads the same counts: the mirrored counter does not add them again.
  EXPECT_TRUE(Has(metrics_.Render(*core_), "shardline_attempts_started_total 1\n"));
}

TEST_F(CoordinatorMetricsTest, JobGaugesLeaveWhenTheJobStopsRunning) {
  const std::string gone = RunningJob("gone");
  const std::string kept = RunningJob("kept");
  ASSERT_TRUE(Has(metrics_.Render(*core_), absl::StrCat("job=\"", gone, "\"")));
  ASSERT_TRUE(core_->CancelJob(gone, "test").ok());
  const std::string text = metrics_.Render(*core_);
  EXPECT_FALSE(Has(text, absl::StrCat("job=\"", gone, "\""))) << text;
  EXPECT_TRUE(Has(text, absl::StrCat("shardline_job_mfu{job=\"", kept, "\",name=\"kept\"} 0.25\n")))
      << text;
  EXPECT_TRUE(Has(text, "shardline_jobs{state=\"CANCELLED\"} 1\n")) << text;
}

TEST_F(CoordinatorMetricsTest, RpcsCountByMethodAndCodeWithALatencyHistogram) {
  metrics_.ObserveRpc("Heartbeat", 0, absl::Milliseconds(2));
  metrics_.ObserveRpc("Heartbeat", 0, absl::Milliseconds(20));
  metrics_.ObserveRpc("ListJobs", 16, absl::Microseconds(100));
  const std::string text = metrics_.Render(*core_);
  EXPECT_TRUE(Has(text, "# TYPE shardline_rpc_total counter\n")) << text;
  EXPECT_TRUE(Has(text, "shardline_rpc_total{code=\"OK\",method=\"Heartbeat\"} 2\n")) << text;
  EXPECT_TRUE(Has(text, "shardline_rpc_total{code=\"UNAUTHENTICATED\",method=\"ListJobs\"} 1\n"))
      << text;
  EXPECT_TRUE(Has(text, "# TYPE shardline_rpc_latency_seconds histogram\n")) << text;
  EXPECT_TRUE(
      Has(text, "shardline_rpc_latency_seconds_bucket{method=\"Heartbeat\",le=\"0.001\"} 0\n"))
      << text;
  EXPECT_TRUE(
      Has(text, "shardline_rpc_latency_seconds_bucket{method=\"Heartbeat\",le=\"0.0025\"} 1\n"))
      << text;
  EXPECT_TRUE(
      Has(text, "shardline_rpc_latency_seconds_bucket{method=\"Heartbeat\",le=\"+Inf\"} 2\n"))
      << text;
  EXPECT_TRUE(Has(text, "shardline_rpc_latency_seconds_count{method=\"Heartbeat\"} 2\n")) << text;
  EXPECT_TRUE(Has(text, "shardline_rpc_latency_seconds_sum{method=\"Heartbeat\"} 0.022")) << text;
}

TEST_F(CoordinatorMetricsTest, MethodsTheServerDoesNotServeCountUnderOneUnknownLabel) {
  EXPECT_EQ(CoordinatorMetrics::MethodLabel("/shardline.Coordinator/Heartbeat"), "Heartbeat");
  EXPECT_EQ(CoordinatorMetrics::MethodLabel("/shardline.Coordinator/ShipLogs"), "ShipLogs");
  EXPECT_EQ(CoordinatorMetrics::MethodLabel("/grpc.health.v1.Health/Check"), "Check");
  EXPECT_EQ(CoordinatorMetrics::MethodLabel("/shardline.Coordinator/MadeUp"), "unknown");
  EXPECT_EQ(CoordinatorMetrics::MethodLabel("/evil.Service/Heartbeat"), "unknown");
  EXPECT_EQ(CoordinatorMetrics::MethodLabel(""), "unknown");
  // A client sending a thousand made-up paths: one series, not a thousand.
  for (int i = 0; i < 1000; ++i) {
    metrics_.ObserveRpc(absl::StrCat("MadeUp", i), 12, absl::Microseconds(10));
  }
  const std::string text = metrics_.Render(*core_);
  EXPECT_FALSE(Has(text, "MadeUp")) << text.substr(0, 2000);
  EXPECT_TRUE(Has(text, "shardline_rpc_total{code=\"UNIMPLEMENTED\",method=\"unknown\"} 1000\n"))
      << text;
  EXPECT_TRUE(Has(text, "shardline_rpc_latency_seconds_count{method=\"unknown\"} 1000\n")) << text;
}

}  // namespace
}  // namespace shardline::coordinator
