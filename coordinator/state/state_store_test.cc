#include "coordinator/state/state_store.h"

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"

namespace shardline::coordinator {
namespace {

std::string TempDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  return std::string(base ? base : "/tmp") + "/" + name;
}

TEST(StateStore, RecordsSurviveReopen) {
  const std::string dir = TempDir("store_reopen");
  {
    auto store = StateStore::Open(dir);
    ASSERT_TRUE(store.ok()) << store.status();
    JobRecord job;
    job.set_seq(2);
    job.mutable_status()->set_job_id("job-2");
    job.mutable_status()->set_state(RUNNING);
    ASSERT_TRUE((*store)->PutJob(job).ok());
    job.set_seq(1);
    job.mutable_status()->set_job_id("job-1");
    job.mutable_status()->set_state(PENDING);
    ASSERT_TRUE((*store)->PutJob(job).ok());
    job.mutable_status()->set_state(FAILED);  // replaces
    ASSERT_TRUE((*store)->PutJob(job).ok());
    CheckpointRecord c;
    c.mutable_info()->set_job_id("job-1");
    c.mutable_info()->set_step(5);
    ASSERT_TRUE((*store)->PutCheckpoint(c).ok());
    c.mutable_info()->set_step(6);
    ASSERT_TRUE((*store)->PutCheckpoint(c).ok());
    ASSERT_TRUE((*store)->DeleteCheckpoint("job-1", 5).ok());
    WorkerInfo w;
    w.set_worker_id("w1");
    w.set_node_name("a");
    ASSERT_TRUE((*store)->PutWorker(w).ok());
  }
  auto store = StateStore::Open(dir);
  ASSERT_TRUE(store.ok()) << store.status();
  auto jobs = (*store)->LoadJobs();
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ(jobs->size(), 2u);
  EXPECT_EQ((*jobs)[0].status().job_id(), "job-1");  // by seq
  EXPECT_EQ((*jobs)[0].status().state(), FAILED);
  EXPECT_EQ((*jobs)[1].status().state(), RUNNING);
  auto cps = (*store)->LoadCheckpoints();
  ASSERT_EQ(cps->size(), 1u);
  EXPECT_EQ((*cps)[0].info().step(), 6);
  EXPECT_EQ((*store)->LoadWorkers()->at(0).node_name(), "a");
}

TEST(StateStore, JobMetricsReplaceTheirJobsRowAndSurviveReopen) {
  const std::string dir = TempDir("store_metrics");
  {
    auto store = StateStore::Open(dir);
    ASSERT_TRUE(store.ok()) << store.status();
    JobMetricsRecord m;
    m.set_job_id("job-1");
    m.add_points()->set_step(10);
    ASSERT_TRUE((*store)->PutJobMetrics(m).ok());
    m.add_points()->set_step(20);  // the batched write replaces the job's row
    ASSERT_TRUE((*store)->PutJobMetrics(m).ok());
  }
  auto store = StateStore::Open(dir);
  ASSERT_TRUE(store.ok()) << store.status();
  auto metrics = (*store)->LoadJobMetrics();
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  ASSERT_EQ(metrics->size(), 1u);
  EXPECT_EQ((*metrics)[0].job_id(), "job-1");
  ASSERT_EQ((*metrics)[0].points_size(), 2);
  EXPECT_EQ((*metrics)[0].points(1).step(), 20);
}

TEST(StateStore, DeleteJobRemovesItsRecordCheckpointsAndSeriesOnly) {
  auto store = StateStore::Open(TempDir("store_delete_job"));
  ASSERT_TRUE(store.ok()) << store.status();
  for (const char* id : {"job-a", "job-b"}) {
    JobRecord job;
    job.mutable_status()->set_job_id(id);
    ASSERT_TRUE((*store)->PutJob(job).ok());
    CheckpointRecord c;
    c.mutable_info()->set_job_id(id);
    for (int step : {1, 2}) {
      c.mutable_info()->set_step(step);
      ASSERT_TRUE((*store)->PutCheckpoint(c).ok());
    }
    JobMetricsRecord m;
    m.set_job_id(id);
    m.add_points()->set_step(10);
    ASSERT_TRUE((*store)->PutJobMetrics(m).ok());
  }
  ASSERT_TRUE((*store)->DeleteJob("job-a").ok());
  ASSERT_TRUE((*store)->DeleteJob("job-never").ok());  // nothing to delete is fine
  auto jobs = (*store)->LoadJobs();
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ(jobs->size(), 1u);
  EXPECT_EQ((*jobs)[0].status().job_id(), "job-b");
  auto cps = (*store)->LoadCheckpoints();
  ASSERT_TRUE(cps.ok());
  ASSERT_EQ(cps->size(), 2u);
  for (const CheckpointRecord& c : *cps) EXPECT_EQ(c.info().job_id(), "job-b");
  auto metrics = (*store)->LoadJobMetrics();
  ASSERT_TRUE(metrics.ok());
  ASSERT_EQ(metrics->size(), 1u);
  EXPECT_EQ((*metrics)[0].job_id(), "job-b");
}

TEST(StateStore, UnwritableDirectoryIsUnavailable) {
  auto store = StateStore::Open("/proc/no/such/dir");
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(store.status().message().find("state_dir"), std::string::npos);
}

TEST(StateStore, RendezvousValuesSurviveReopenAndADeletedNamespaceIsGone) {
  const std::string dir = TempDir("store_rendezvous");
  {
    auto store = StateStore::Open(dir);
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)
                    ->ApplyRendezvous({{false, "job-1/1", "b", std::string("\0\xff", 2)},
                                       {false, "job-1/1", "a", "1"},
                                       {false, "job-1/1", "a", "2"},  // replaces
                                       {false, "job-2/1", "x", ""},
                                       {false, "job-3/1", "y", "gone"}})
                    .ok());
    ASSERT_TRUE((*store)->ApplyRendezvous({{true, "job-3/1", "", ""}}).ok());
    ASSERT_TRUE((*store)->ApplyRendezvous({}).ok());
  }
  auto store = StateStore::Open(dir);
  ASSERT_TRUE(store.ok()) << store.status();
  auto rows = (*store)->LoadRendezvous();
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 3u);
  EXPECT_EQ((*rows)[0].ns, "job-1/1");
  EXPECT_EQ((*rows)[0].key, "a");
  EXPECT_EQ((*rows)[0].value, "2");
  EXPECT_EQ((*rows)[1].key, "b");
  EXPECT_EQ((*rows)[1].value, std::string("\0\xff", 2));
  EXPECT_EQ((*rows)[2].ns, "job-2/1");
  EXPECT_EQ((*rows)[2].value, "");
}

TEST(StateStore, ADeleteInABatchRemovesOnlyTheValuesBeforeIt) {
  auto store = StateStore::Open(TempDir("store_rendezvous_order"));
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE((*store)
                  ->ApplyRendezvous({{false, "job-1/1", "old", "1"},
                                     {true, "job-1/1", "", ""},
                                     {false, "job-1/1", "new", "2"}})
                  .ok());
  auto rows = (*store)->LoadRendezvous();
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ((*rows)[0].key, "new");
}

}  // namespace
}  // namespace shardline::coordinator
