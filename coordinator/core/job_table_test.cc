#include "coordinator/core/job_table.h"

#include <cstdlib>

#include <set>

#include "absl/strings/str_cat.h"
#include "coordinator/core/job_state_machine.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shardline::coordinator {
namespace {

const absl::Time kNow = absl::FromUnixSeconds(1700000000);
StateWriter kNoStore(/*store=*/nullptr, absl::Seconds(1));
// 1700000000000 ms in base 36, then 4 random base-36 characters.
constexpr char kIdAtNow[] = "job-loyw3v28[0-9a-z]{4}";

JobSpec Spec(const std::string& name) {
  JobSpec spec;
  spec.set_name(name);
  spec.set_world_size(2);
  spec.mutable_train()->set_steps(50);
  return spec;
}

TEST(JobTable, SubmitGivesIdsInSubmissionOrderAndReportsTheChange) {
  ChangeFeed feed;
  JobTable jobs(&kNoStore, &feed);
  auto a = jobs.Submit(Spec("a"), kNow);
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = jobs.Submit(Spec("b"), kNow);
  ASSERT_TRUE(b.ok()) << b.status();
  const JobStatus& st = (*a)->status();
  EXPECT_THAT(st.job_id(), ::testing::MatchesRegex(kIdAtNow));
  EXPECT_EQ(st.state(), PENDING);
  EXPECT_EQ(st.world_size(), 2);
  EXPECT_EQ(st.total_steps(), 50);
  EXPECT_EQ(st.spec().name(), "a");
  ASSERT_EQ(st.events_size(), 1);
  EXPECT_EQ(st.events(0).kind(), "SUBMITTED");
  const std::string a_id = st.job_id(), b_id = (*b)->status().job_id();
  EXPECT_THAT(b_id, ::testing::MatchesRegex(kIdAtNow));
  EXPECT_NE(a_id, b_id);  // same millisecond: the random part tells them apart
  EXPECT_EQ((*a)->seq(), 1);
  EXPECT_EQ((*b)->seq(), 2);
  EXPECT_EQ(feed.Version(a_id), 1);
  EXPECT_EQ(feed.Version(b_id), 2);
  jobs.Changed(**a);
  EXPECT_EQ(feed.Version(a_id), 3);
}

TEST(JobTable, ChangedKeepsTheNewestEventsAndCountsTheDropped) {
  ChangeFeed feed;
  JobTable jobs(&kNoStore, &feed, /*max_events=*/3);
  auto j = jobs.Submit(Spec("a"), kNow);
  ASSERT_TRUE(j.ok()) << j.status();
  for (int i = 0; i < 5; ++i) JobStateMachine(*j, kNow).Note("NOTE", absl::StrCat("n", i));
  jobs.Changed(**j);
  const JobStatus& st = (*j)->status();
  ASSERT_EQ(st.events_size(), 3);
  EXPECT_EQ(st.events(0).message(), "n2");
  EXPECT_EQ(st.events(2).message(), "n4");
  EXPECT_EQ(st.events_dropped(), 3);  // SUBMITTED, n0, n1
  JobStateMachine(*j, kNow).Note("NOTE", "n5");
  jobs.Changed(**j);
  EXPECT_EQ(st.events(2).message(), "n5");
  EXPECT_EQ(st.events_dropped(), 4);
  // A record stored under a larger bound is trimmed when restored.
  JobRecord big = **j;
  for (int i = 0; i < 10; ++i) JobStateMachine(&big, kNow).Note("NOTE", "x");
  big.mutable_status()->set_job_id("job-restored");
  EXPECT_EQ(jobs.Restore(big).status().events_size(), 3);
  EXPECT_EQ(jobs.Restore(big).status().events_dropped(), 14);
}

TEST(JobTable, CollectFinishedByAgeThenCountNeverUnfinished) {
  ChangeFeed feed;
  JobTable jobs(&kNoStore, &feed);
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) {
    auto j = jobs.Submit(Spec("j"), kNow);
    ASSERT_TRUE(j.ok());
    ids.push_back((*j)->status().job_id());
    // Jobs 0-3 finish at kNow + i minutes; job 4 stays PENDING.
    if (i < 4) ASSERT_TRUE(JobStateMachine(*j, kNow + absl::Minutes(i)).Cancel("done").ok());
  }
  // Nothing is old enough and the count bound is wide: nothing goes.
  EXPECT_TRUE(jobs.CollectFinished(kNow + absl::Minutes(4), absl::Minutes(10), 10).empty());
  // TTL 2 minutes at kNow + 3m30s: jobs 0 and 1 (finished at 0 and 1 min) go, oldest first.
  EXPECT_EQ(jobs.CollectFinished(kNow + absl::Seconds(210), absl::Minutes(2), 0),
            (std::vector<std::string>{ids[0], ids[1]}));
  // A count bound of 1: of jobs 2 and 3 the older goes; the PENDING job is never collected.
  EXPECT_EQ(jobs.CollectFinished(kNow, absl::ZeroDuration(), 1),
            (std::vector<std::string>{ids[2]}));
  EXPECT_EQ(jobs.CollectFinished(kNow + absl::Hours(100), absl::Minutes(1), 0),
            (std::vector<std::string>{ids[3]}));
  EXPECT_EQ(jobs.records().size(), 1u);
  EXPECT_TRUE(jobs.Find(ids[4]).ok());
  EXPECT_EQ(jobs.Find(ids[0]).status().code(), absl::StatusCode::kNotFound);
}

TEST(JobTable, FindListAndCount) {
  ChangeFeed feed;
  JobTable jobs(&kNoStore, &feed);
  std::vector<std::string> ids;
  for (int i = 0; i < 11; ++i) {
    // Later submissions get later ids, in ms; the list must follow seq all the same.
    auto j = jobs.Submit(Spec("j"), kNow + absl::Milliseconds(11 - i));
    ASSERT_TRUE(j.ok());
    ids.push_back((*j)->status().job_id());
  }
  (*jobs.Find(ids[1]))->mutable_status()->set_state(RUNNING);
  auto missing = jobs.Find("job-99");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(), "unknown job job-99");
  // Submission order, not id order (the ids above sort in reverse as strings).
  const std::vector<JobStatus> all = jobs.List({});
  ASSERT_EQ(all.size(), 11u);
  for (int i = 0; i < 11; ++i) EXPECT_EQ(all[i].job_id(), ids[i]);
  const std::vector<JobStatus> running = jobs.List({RUNNING});
  ASSERT_EQ(running.size(), 1u);
  EXPECT_EQ(running[0].job_id(), ids[1]);
  const std::map<JobState, int> counts = jobs.CountByState();
  EXPECT_EQ(counts.at(PENDING), 10);
  EXPECT_EQ(counts.at(RUNNING), 1);
}

TEST(JobTable, JobsAreStoredAndRestoredWithTheirSequence) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/job_table";
  std::string a_id;
  {
    auto store = StateStore::Open(dir);
    ASSERT_TRUE(store.ok()) << store.status();
    StateWriter writer(*std::move(store), absl::Seconds(1));
    ChangeFeed feed;
    JobTable jobs(&writer, &feed);
    auto a = jobs.Submit(Spec("a"), kNow);
    ASSERT_TRUE(a.ok());
    a_id = (*a)->status().job_id();
    (*a)->mutable_status()->set_message("changed");
    jobs.Changed(**a);
    ASSERT_TRUE(jobs.Submit(Spec("b"), kNow).ok());
  }
  auto store = StateStore::Open(dir);
  ASSERT_TRUE(store.ok()) << store.status();
  StateWriter writer(*std::move(store), absl::Seconds(1));
  auto loaded = writer.store()->LoadJobs();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ(loaded->size(), 2u);
  ChangeFeed feed;
  JobTable jobs(&writer, &feed);
  for (const JobRecord& rec : *loaded) jobs.Restore(rec);
  EXPECT_EQ((*jobs.Find(a_id))->status().message(), "changed");
  EXPECT_EQ(feed.Version(a_id), 1);  // known, not reported as changed
  absl::Mutex mu;
  absl::MutexLock lock(&mu);
  ChangeFeed::Dirty dirty;
  feed.WaitDirtyLocked(&mu, absl::ZeroDuration(), &dirty);
  EXPECT_TRUE(dirty.jobs.empty());
  auto c = jobs.Submit(Spec("c"), kNow);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ((*c)->seq(), 3);  // numbering goes on after the restored ones
}

// Progress is written at most once per interval per job (one write for many reports), the feed
// hears of it at once, a full Changed write carries it along, a removed job's pending write is
// dropped, and the newest progress is what the store holds after the flush.
TEST(JobTable, ProgressWritesWaitForTheFlushIntervalOtherChangesDoNot) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/job_table_progress";
  const absl::Duration interval = absl::Seconds(5);
  std::string a_id;
  {
    auto store = StateStore::Open(dir);
    ASSERT_TRUE(store.ok()) << store.status();
    StateWriter writer(*std::move(store), absl::Seconds(1));
    ChangeFeed feed;
    JobTable jobs(&writer, &feed);
    auto a = jobs.Submit(Spec("a"), kNow);
    ASSERT_TRUE(a.ok());
    a_id = (*a)->status().job_id();
    const StateWriter::Ticket t0 = writer.last_ticket();
    (*a)->mutable_status()->set_step(10);
    jobs.ProgressChanged(**a, kNow);
    EXPECT_EQ(writer.last_ticket(), t0);  // nothing queued
    EXPECT_EQ(feed.Version(a_id), 2);     // watchers hear of it at once
    (*a)->mutable_status()->set_step(20);
    jobs.ProgressChanged(**a, kNow + absl::Seconds(3));
    jobs.FlushDeferred(kNow + absl::Seconds(4), interval, /*all=*/false);
    EXPECT_EQ(writer.last_ticket(), t0);  // 4 s after the first change: not yet
    jobs.FlushDeferred(kNow + absl::Seconds(5), interval, /*all=*/false);
    EXPECT_EQ(writer.last_ticket(), t0 + 1);  // one write for both reports
    jobs.FlushDeferred(kNow + absl::Seconds(60), interval, /*all=*/false);
    EXPECT_EQ(writer.last_ticket(), t0 + 1);  // and only once
    // A full write carries a pending progress change along.
    (*a)->mutable_status()->set_step(30);
    jobs.ProgressChanged(**a, kNow + absl::Seconds(61));
    jobs.Changed(**a);
    jobs.FlushDeferred(kNow + absl::Seconds(61), interval, /*all=*/true);
    EXPECT_EQ(writer.last_ticket(), t0 + 2);
    // A job collected with a pending progress write is not written back.
    auto b = jobs.Submit(Spec("b"), kNow);
    ASSERT_TRUE(b.ok());
    const std::string b_id = (*b)->status().job_id();
    ASSERT_TRUE(JobStateMachine(*b, kNow).Cancel("done").ok());
    jobs.Changed(**b);
    jobs.ProgressChanged(**b, kNow);
    const StateWriter::Ticket t1 = writer.last_ticket();
    EXPECT_EQ(jobs.CollectFinished(kNow + absl::Hours(1), absl::Minutes(1), 0),
              (std::vector<std::string>{b_id}));
    jobs.FlushDeferred(kNow + absl::Hours(1), interval, /*all=*/true);
    EXPECT_EQ(writer.last_ticket(), t1);
    // The last progress, pending at shutdown, is written by the final flush.
    (*a)->mutable_status()->set_step(40);
    jobs.ProgressChanged(**a, kNow + absl::Seconds(70));
    jobs.FlushDeferred(kNow + absl::Seconds(70), interval, /*all=*/true);
    EXPECT_EQ(writer.last_ticket(), t1 + 1);
  }
  auto store = StateStore::Open(dir);
  ASSERT_TRUE(store.ok()) << store.status();
  auto loaded = (*store)->LoadJobs();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  bool found = false;
  for (const JobRecord& rec : *loaded) {
    if (rec.status().job_id() != a_id) continue;
    found = true;
    EXPECT_EQ(rec.status().step(), 40);
  }
  EXPECT_TRUE(found);
}

TEST(JobTable, IdsAreNotReusedByATableWithoutAStore) {
  // A coordinator without --state_dir forgets its jobs; the next one must not hand out an id
  // again (its checkpoints live under <checkpoint.dir>/<job id>): the old scheme gave "job-1"
  // to the first job of every lifetime.
  std::set<std::string> seen;
  for (int life = 0; life < 20; ++life) {
    ChangeFeed feed;
    JobTable jobs(&kNoStore, &feed);
    auto j = jobs.Submit(Spec("same"), kNow + absl::Milliseconds(life));
    ASSERT_TRUE(j.ok());
    EXPECT_EQ((*j)->seq(), 1);
    EXPECT_TRUE(seen.insert((*j)->status().job_id()).second) << (*j)->status().job_id();
  }
  EXPECT_EQ(NewJobId(kNow).substr(0, 12), "job-loyw3v28");
  EXPECT_EQ(NewJobId(kNow + absl::Milliseconds(1)).substr(0, 12), "job-loyw3v29");
}

}  // namespace
}  // namespace shardline::coordinator
