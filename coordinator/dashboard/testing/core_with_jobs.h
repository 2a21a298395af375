// CoreWithJobs: a real CoordinatorCore in memory on a fake clock, with helpers that put RUNNING
// jobs, progress reports, log lines and checkpoints in it, for the dashboard's tests.
#ifndef SHARDLINE_COORDINATOR_DASHBOARD_TESTING_CORE_WITH_JOBS_H_
#define SHARDLINE_COORDINATOR_DASHBOARD_TESTING_CORE_WITH_JOBS_H_

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/testing/fake_clock.h"
#include "coordinator/core/coordinator_core.h"
#include "gtest/gtest.h"

namespace shardline::coordinator::dashboard {

class CoreWithJobs {
 public:
  CoreWithJobs() {
    CoreOptions o;
    o.clock = &clock_;
    o.heartbeat_interval = absl::Seconds(1);
    o.heartbeat_timeout = absl::Seconds(5);
    auto core = CoordinatorCore::Create(o);
    EXPECT_TRUE(core.ok()) << core.status();
    core_ = std::move(*core);
  }

  CoordinatorCore* core() { return core_.get(); }

  // A job named `name` of `owner`, RUNNING at W = `world` (HYBRID_SHARD with shard degree 2 when
  // `world` is 4) on a worker of its own; returns its id.
  std::string RunningJob(const std::string& name, const std::string& owner, int world = 2) {
    RegisterWorkerRequest r;
    r.set_node_name(absl::StrCat("node-", ++nodes_));
    r.set_address("n:0");
    for (int i = 0; i < world; ++i) {
      Slot* s = r.add_slots();
      s->set_kind(Slot::CPU);
      s->set_index(i);
    }
    auto w = core_->RegisterWorker(r);
    EXPECT_TRUE(w.ok()) << w.status();
    worker_ids_.push_back(w->worker_id());
    JobSpec spec;
    spec.set_name(name);
    spec.set_world_size(world);
    spec.mutable_fsdp()->set_sharding_strategy(world == 4 ? FsdpSpec::HYBRID_SHARD
                                                          : FsdpSpec::FULL_SHARD);
    spec.mutable_fsdp()->set_hybrid_shard_degree(world == 4 ? 2 : 0);
    spec.mutable_train()->set_steps(100);
    auto job = core_->SubmitJob(spec, owner);
    EXPECT_TRUE(job.ok()) << job.status();
    EXPECT_EQ(core_->GetJob(*job)->state(), RUNNING);
    return *job;
  }

  // Rank 0's progress report of `step`.
  void Report(const std::string& job, int64_t step, double loss) {
    ProgressReport p;
    p.set_job_id(job);
    p.set_attempt(1);
    p.set_rank(0);
    p.set_step(step);
    p.set_loss(loss);
    p.set_tokens_per_s(1000 + step);
    p.set_val_loss(NAN);
    EXPECT_TRUE(core_->ReportProgress(p).ok());
  }

  // Lines of rank `rank`, shipped by the job's worker.
  void Log(const std::string& job, int rank, std::vector<std::string> lines) {
    ShipLogsRequest req;
    auto st = core_->GetJob(job);  // the worker the rank is placed on: only it may ship them
    if (st.ok() && rank < st->placement_size()) req.set_worker_id(st->placement(rank).worker_id());
    RankLogChunk* c = req.add_chunks();
    c->set_job_id(job);
    c->set_attempt(1);
    c->set_rank(rank);
    c->set_time_unix_ms(absl::ToUnixMillis(clock_.Now()));
    for (auto& l : lines) c->add_lines(std::move(l));
    EXPECT_TRUE(core_->ShipLogs(req).ok());
  }

 private:
  FakeClock clock_;
  std::unique_ptr<CoordinatorCore> core_;
  std::vector<std::string> worker_ids_;
  int nodes_ = 0;
};

}  // namespace shardline::coordinator::dashboard

#endif  // SHARDLINE_COORDINATOR_DASHBOARD_TESTING_CORE_WITH_JOBS_H_
