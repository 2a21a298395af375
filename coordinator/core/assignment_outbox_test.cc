#include "coordinator/core/assignment_outbox.h"

#include <thread>

#include "gtest/gtest.h"

namespace shardline::coordinator {
namespace {

// job-1 attempt 2: ranks 0 and 1 on w-a, rank 2 on w-b.
JobRecord Record() {
  JobRecord rec;
  rec.set_rendezvous_secret("secret");
  JobStatus& st = *rec.mutable_status();
  st.set_job_id("job-1");
  st.set_attempt(2);
  st.set_world_size(3);
  st.mutable_spec()->set_name("tiny");
  for (int r = 0; r < 3; ++r) {
    RankPlacement* p = st.add_placement();
    p->set_rank(r);
    p->set_worker_id(r < 2 ? "w-a" : "w-b");
    p->set_slot_index(r < 2 ? r + 4 : 0);
    p->set_local_rank(r < 2 ? r : 0);
  }
  return rec;
}

AttemptStartInfo Info() { return {"job-1/2", "10.0.0.1", 30}; }

bool AllRunning(const std::string&, int32_t) { return true; }

class OutboxTest : public ::testing::Test {
 protected:
  // Next assignment of (worker, generation) without waiting.
  absl::StatusOr<bool> Next(const std::string& worker, int64_t generation, Assignment* out,
                            bool running = true) {
    absl::MutexLock lock(&mu_);
    return outbox_.NextLocked(
        &mu_, worker, generation, absl::ZeroDuration(),
        [running](const std::string&, int32_t) { return running; }, out);
  }

  absl::Mutex mu_;
  ChangeFeed feed_;
  AssignmentOutbox outbox_{&feed_, /*stop_grace_period_s=*/7};
};

TEST_F(OutboxTest, StartsCarryThePlacementAndTheAttemptsShared) {
  const auto all = outbox_.Starts(Record(), Info(), "");
  ASSERT_EQ(all.size(), 3u);
  for (int r = 0; r < 3; ++r) {
    const auto& [worker, a] = all[r];
    EXPECT_EQ(worker, r < 2 ? "w-a" : "w-b");
    EXPECT_EQ(a.action(), Assignment::START);
    EXPECT_EQ(a.job_id(), "job-1");
    EXPECT_EQ(a.attempt(), 2);
    EXPECT_EQ(a.rank(), r);
    EXPECT_EQ(a.world_size(), 3);
    EXPECT_EQ(a.local_rank(), r < 2 ? r : 0);
    EXPECT_EQ(a.local_world_size(), r < 2 ? 2 : 1);
    EXPECT_EQ(a.slot_index(), r < 2 ? r + 4 : 0);
    EXPECT_EQ(a.rendezvous_namespace(), "job-1/2");
    EXPECT_EQ(a.rendezvous_secret(), "secret");
    EXPECT_EQ(a.master_addr(), "10.0.0.1");
    EXPECT_EQ(a.resume_step(), 30);
    EXPECT_EQ(a.grace_period_s(), 7);
    EXPECT_EQ(a.spec().name(), "tiny");
  }
  const auto only_b = outbox_.Starts(Record(), Info(), "w-b");
  ASSERT_EQ(only_b.size(), 1u);
  EXPECT_EQ(only_b[0].second.rank(), 2);
  EXPECT_EQ(only_b[0].second.local_world_size(), 1);
}

TEST_F(OutboxTest, StreamDeliversPushesInOrderAndSkipsStartsOfEndedAttempts) {
  int64_t gen;
  {
    absl::MutexLock lock(&mu_);
    gen = outbox_.Open("w-a", {});
    outbox_.PushStarts(Record(), Info());
    outbox_.PushStop("w-a", "job-0", 1);
  }
  Assignment a;
  ASSERT_TRUE(*Next("w-a", gen, &a));
  EXPECT_EQ(a.rank(), 0);
  ASSERT_TRUE(*Next("w-a", gen, &a));
  EXPECT_EQ(a.rank(), 1);
  ASSERT_TRUE(*Next("w-a", gen, &a));
  EXPECT_EQ(a.action(), Assignment::STOP);
  EXPECT_EQ(a.job_id(), "job-0");
  EXPECT_EQ(a.attempt(), 1);
  EXPECT_EQ(a.grace_period_s(), 7);
  EXPECT_FALSE(*Next("w-a", gen, &a));  // empty: nothing yet
  {
    absl::MutexLock lock(&mu_);
    outbox_.PushStarts(Record(), Info());
    outbox_.PushStop("w-a", "job-1", 2);
  }
  // The attempt ended before delivery: its STARTs are dropped, its STOP still goes out.
  ASSERT_TRUE(*Next("w-a", gen, &a, /*running=*/false));
  EXPECT_EQ(a.action(), Assignment::STOP);
  EXPECT_FALSE(*Next("w-a", gen, &a));
}

TEST_F(OutboxTest, NewStreamSupersedesTheOldAndReplacesTheQueue) {
  int64_t first, second;
  {
    absl::MutexLock lock(&mu_);
    outbox_.PushStop("w-a", "job-0", 1);  // before any stream: replaced by the first Open
    first = outbox_.Open("w-a", {});
    outbox_.PushStop("w-a", "job-0", 1);
    std::vector<Assignment> resend;
    for (auto& [w, a] : outbox_.Starts(Record(), Info(), "w-a")) resend.push_back(a);
    resend.pop_back();
    second = outbox_.Open("w-a", std::move(resend));
  }
  EXPECT_EQ(second, first + 1);
  Assignment a;
  const auto old = Next("w-a", first, &a);
  EXPECT_EQ(old.status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(old.status().message(), "assignment stream of worker w-a superseded by a newer one");
  ASSERT_TRUE(*Next("w-a", second, &a));
  EXPECT_EQ(a.action(), Assignment::START);
  EXPECT_EQ(a.rank(), 0);
  EXPECT_FALSE(*Next("w-a", second, &a));
}

TEST_F(OutboxTest, DroppedWorkerAbortsAndShutdownIsUnavailable) {
  int64_t a_gen, b_gen;
  {
    absl::MutexLock lock(&mu_);
    a_gen = outbox_.Open("w-a", {});
    b_gen = outbox_.Open("w-b", {});
    outbox_.Drop("w-a");
  }
  Assignment a;
  EXPECT_EQ(Next("w-a", a_gen, &a).status().code(), absl::StatusCode::kAborted);
  {
    absl::MutexLock lock(&mu_);
    feed_.Shutdown();
  }
  const auto r = Next("w-b", b_gen, &a);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(r.status().message(), "coordinator is shutting down");
}

TEST_F(OutboxTest, PushesAreReportedToTheFeedAndWakeAWaitingStream) {
  int64_t gen;
  {
    absl::MutexLock lock(&mu_);
    gen = outbox_.Open("w-b", {});
    ChangeFeed::Dirty dirty;
    ASSERT_TRUE(feed_.WaitDirtyLocked(&mu_, absl::ZeroDuration(), &dirty));
    EXPECT_EQ(dirty.workers, (std::vector<std::string>{"w-b"}));
  }
  std::thread pusher([&] {
    absl::SleepFor(absl::Milliseconds(50));
    absl::MutexLock lock(&mu_);
    outbox_.PushStop("w-b", "job-1", 2);
  });
  Assignment a;
  absl::StatusOr<bool> got;
  {
    absl::MutexLock lock(&mu_);
    got = outbox_.NextLocked(&mu_, "w-b", gen, absl::Seconds(30), AllRunning, &a);
  }
  pusher.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(*got);
  EXPECT_EQ(a.action(), Assignment::STOP);
}

}  // namespace
}  // namespace shardline::coordinator
