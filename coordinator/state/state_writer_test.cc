#include "coordinator/state/state_writer.h"

#include <cstdlib>
#include <string>

#include "coordinator/testing/small_fs.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shardline::coordinator {
namespace {

using ::testing::HasSubstr;

std::string TmpDir(const std::string& name) {
  return std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
}

JobRecord Job(const std::string& id, int64_t seq, const std::string& message = "") {
  JobRecord job;
  job.set_seq(seq);
  job.mutable_status()->set_job_id(id);
  job.mutable_status()->set_message(message);
  return job;
}

TEST(StateWriter, WritesAreAppliedInOrderAndWaitReturnsOnceDurable) {
  auto store = StateStore::Open(TmpDir("order"));
  ASSERT_TRUE(store.ok()) << store.status();
  StateWriter writer(*std::move(store), absl::Milliseconds(20));
  StateWriter::Ticket last = 0;
  for (int i = 0; i < 50; ++i) last = writer.PutJob(Job("job-a", 1, std::to_string(i)));
  ASSERT_TRUE(writer.PutJobOrDrop(Job("job-b", 2)).ok());
  EXPECT_TRUE(writer.Wait(last).ok());
  EXPECT_FALSE(writer.stuck());
  auto jobs = writer.store()->LoadJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 2u);
  EXPECT_EQ((*jobs)[0].status().message(), "49");  // the last of the queued changes
}

TEST(StateWriter, WithoutAStoreEveryWriteIsDurableAtOnce) {
  StateWriter writer(nullptr, absl::Milliseconds(20));
  EXPECT_TRUE(writer.Wait(writer.PutJob(Job("job-a", 1))).ok());
  EXPECT_TRUE(writer.PutJobOrDrop(Job("job-b", 2)).ok());
  EXPECT_EQ(writer.last_ticket(), 2);
}

TEST(StateWriter, FullDiskMakesItReadOnlyAndFreedSpaceDrainsTheQueueInOrder) {
  // Issue #21 item 4: a failed write was only logged. Here it fails its waiter, stays queued
  // and is retried, in order, once the disk has room again.
  auto fs = testing::SmallFs::Create(TmpDir("small"), 512 << 10);
  if (!fs.ok()) GTEST_SKIP() << fs.status();
  auto store = StateStore::Open((*fs)->dir() + "/state");
  ASSERT_TRUE(store.ok()) << store.status();
  StateWriter writer(*std::move(store), absl::Milliseconds(20));
  ASSERT_TRUE(writer.Wait(writer.PutJob(Job("job-a", 1, "before"))).ok());
  ASSERT_TRUE((*fs)->Fill().ok());

  const StateWriter::Ticket cancel = writer.PutJob(Job("job-a", 1, "cancelled"));
  absl::Status s = writer.Wait(cancel);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr("the state store cannot be written: sqlite write: "
                                     "database or disk is full (the write is retried every"));
  EXPECT_TRUE(writer.stuck());
  EXPECT_THAT(writer.read_only_reason(), HasSubstr("database or disk is full"));
  EXPECT_EQ(writer.CheckWritable().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(writer.CheckWritable().message(),
              HasSubstr("coordinator is read-only: the state store cannot be written (sqlite "
                        "write: database or disk is full"));
  s = writer.WaitDurable(cancel, "the cancel of job-a");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr("the cancel of job-a is not durable: the state store cannot "
                                     "be written: sqlite write: database or disk is full"));
  EXPECT_THAT(s.message(), HasSubstr("; the coordinator is read-only until the state store can "
                                     "be written again"));
  const StateWriter::Ticket later = writer.PutJob(Job("job-a", 1, "later"));
  // A write that must not outlive its failed RPC is withdrawn, not applied later.
  EXPECT_EQ(writer.PutJobOrDrop(Job("job-dropped", 3)).code(), absl::StatusCode::kUnavailable);

  ASSERT_TRUE((*fs)->Free().ok());
  // Wait answers at once while the head write fails; the retries (every 20 ms) now succeed.
  for (int i = 0; i < 250 && writer.stuck(); ++i) absl::SleepFor(absl::Milliseconds(20));
  EXPECT_TRUE(writer.Wait(later).ok());
  EXPECT_FALSE(writer.stuck());
  EXPECT_TRUE(writer.CheckWritable().ok());
  EXPECT_EQ(writer.read_only_reason(), "");
  auto jobs = writer.store()->LoadJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 1u);
  EXPECT_EQ((*jobs)[0].status().message(), "later");
}

TEST(StateWriter, RendezvousWritesAreStoredInOrderInBatches) {
  auto store = StateStore::Open(TmpDir("rendezvous"));
  ASSERT_TRUE(store.ok()) << store.status();
  StateWriter writer(*std::move(store), absl::Milliseconds(20));
  const int n = 3 * static_cast<int>(StateWriter::kMaxRendezvousBatch);
  StateWriter::Ticket first = 0;
  for (int i = 0; i < n; ++i) {
    const StateWriter::Ticket t =
        writer.PutRendezvousValue("job-1/1", "rank_" + std::to_string(i), std::to_string(i));
    if (i == 0) first = t;
  }
  writer.PutRendezvousValue("job-2/1", "k", "v");
  writer.DeleteRendezvousNamespace("job-2/1");
  const StateWriter::Ticket job = writer.PutJob(Job("job-a", 1));
  // Batched: far fewer tickets than writes (each batch is one transaction).
  EXPECT_LT(job - first, n / 2);
  ASSERT_TRUE(writer.Wait(job).ok());
  auto rows = writer.store()->LoadRendezvous();
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), static_cast<size_t>(n));
  for (const RendezvousRow& r : *rows) {
    EXPECT_EQ(r.ns, "job-1/1");
    EXPECT_EQ(r.key, "rank_" + r.value);
  }
}

TEST(StateWriter, RendezvousWritesWithoutAStoreAreDurableAtOnce) {
  StateWriter writer(nullptr, absl::Milliseconds(20));
  EXPECT_TRUE(writer.Wait(writer.PutRendezvousValue("job-1/1", "k", "v")).ok());
  EXPECT_TRUE(writer.Wait(writer.DeleteRendezvousNamespace("job-1/1")).ok());
  EXPECT_EQ(writer.last_ticket(), 2);
}

}  // namespace
}  // namespace shardline::coordinator
