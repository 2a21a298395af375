#include "coordinator/placement/draining_slots.h"

#include "common/testing/fake_clock.h"
#include "gtest/gtest.h"

namespace shardline::coordinator {
namespace {

// A registry with one worker "w" of two CPU slots, both reserved by job-a attempt 1.
class DrainingSlotsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RegisterWorkerRequest r;
    r.set_node_name("node-a");
    for (int i = 0; i < 2; ++i) {
      Slot* s = r.add_slots();
      s->set_kind(Slot::CPU);
      s->set_index(i);
    }
    worker_ = *registry_.Register(r);
    ASSERT_TRUE(registry_.Reserve(worker_, 0, "job-a/1").ok());
    ASSERT_TRUE(registry_.Reserve(worker_, 1, "job-a/1").ok());
    slots_.Hold(worker_, "job-a", 1, 0, 0);
    slots_.Hold(worker_, "job-a", 1, 1, 1);
  }

  size_t FreeSlots() const {
    auto free = registry_.FreeCapacity(Slot::CPU);
    return free.empty() ? 0 : free[0].free_slots.size();
  }

  static RankStatus Rank(int32_t rank, RankStatus::State state) {
    RankStatus rs;
    rs.set_job_id("job-a");
    rs.set_attempt(1);
    rs.set_rank(rank);
    rs.set_state(state);
    return rs;
  }

  FakeClock clock_;
  WorkerRegistry registry_{&clock_, absl::Seconds(10)};
  DrainingSlots slots_;
  std::string worker_;
};

TEST_F(DrainingSlotsTest, SlotStaysHeldWhileItsRankIsListedRunning) {
  google::protobuf::RepeatedPtrField<RankStatus> ranks;
  *ranks.Add() = Rank(0, RankStatus::RUNNING);
  *ranks.Add() = Rank(1, RankStatus::RUNNING);
  EXPECT_FALSE(slots_.ReleaseExited(worker_, ranks, &registry_));
  EXPECT_EQ(FreeSlots(), 0u);
  EXPECT_TRUE(slots_.Holds(worker_));
  EXPECT_EQ(slots_.CountByJob().at("job-a"), 2);
}

// fault_tolerance REPLICA_GROUPS: a newer generation of the stopped rank running on the same
// worker does not keep the old process's slot held.
TEST_F(DrainingSlotsTest, ANewerGenerationOfTheRankDoesNotHoldTheStoppedOnesSlot) {
  google::protobuf::RepeatedPtrField<RankStatus> ranks;
  RankStatus newer = Rank(0, RankStatus::RUNNING);
  newer.set_generation(1);
  *ranks.Add() = newer;
  *ranks.Add() = Rank(1, RankStatus::RUNNING);
  EXPECT_TRUE(slots_.ReleaseExited(worker_, ranks, &registry_));
  EXPECT_EQ(FreeSlots(), 1u);
  EXPECT_EQ(slots_.CountByJob().at("job-a"), 1);
}

TEST_F(DrainingSlotsTest, ExitedOrUnlistedRankReleasesItsSlotOnly) {
  google::protobuf::RepeatedPtrField<RankStatus> ranks;
  *ranks.Add() = Rank(0, RankStatus::EXITED);
  *ranks.Add() = Rank(1, RankStatus::RUNNING);
  EXPECT_TRUE(slots_.ReleaseExited(worker_, ranks, &registry_));
  EXPECT_EQ(FreeSlots(), 1u);
  EXPECT_EQ(slots_.CountByJob().at("job-a"), 1);

  // Rank 1 is no longer listed at all: it is gone too.
  EXPECT_TRUE(slots_.ReleaseExited(worker_, {}, &registry_));
  EXPECT_EQ(FreeSlots(), 2u);
  EXPECT_FALSE(slots_.Holds(worker_));
  EXPECT_TRUE(slots_.CountByJob().empty());
}

TEST_F(DrainingSlotsTest, RankOfAnotherAttemptDoesNotKeepTheSlot) {
  google::protobuf::RepeatedPtrField<RankStatus> ranks;
  RankStatus next = Rank(0, RankStatus::RUNNING);
  next.set_attempt(2);  // the same rank number of the next attempt is a different process
  *ranks.Add() = next;
  EXPECT_TRUE(slots_.ReleaseExited(worker_, ranks, &registry_));
  EXPECT_EQ(FreeSlots(), 2u);
}

TEST_F(DrainingSlotsTest, ForgetWorkerGroupsRanksByAttempt) {
  slots_.Hold(worker_, "job-b", 3, 2, 7);
  const std::vector<DrainingSlots::LostRanks> lost = slots_.ForgetWorker(worker_);
  ASSERT_EQ(lost.size(), 2u);
  EXPECT_EQ(lost[0].job_id, "job-a");
  EXPECT_EQ(lost[0].attempt, 1);
  EXPECT_EQ(lost[0].ranks, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(lost[1].job_id, "job-b");
  EXPECT_EQ(lost[1].ranks, (std::vector<int32_t>{2}));
  EXPECT_FALSE(slots_.Holds(worker_));
  EXPECT_TRUE(slots_.ForgetWorker(worker_).empty());
}

TEST_F(DrainingSlotsTest, UnknownWorkerIsANoOp) {
  EXPECT_FALSE(slots_.ReleaseExited("w-none", {}, &registry_));
  EXPECT_TRUE(slots_.ForgetWorker("w-none").empty());
}

}  // namespace
}  // namespace shardline::coordinator
