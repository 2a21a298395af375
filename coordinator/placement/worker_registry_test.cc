#include "coordinator/placement/worker_registry.h"

#include <array>
#include <atomic>
#include <climits>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/secrets.h"
#include "common/testing/fake_clock.h"
#include "gtest/gtest.h"

namespace shardline::coordinator {
namespace {

RegisterWorkerRequest Req(const std::string& node, int cpu_slots, int cuda_slots = 0) {
  RegisterWorkerRequest r;
  r.set_node_name(node);
  r.set_address(node + ".local");
  for (int i = 0; i < cpu_slots; ++i) {
    Slot* s = r.add_slots();
    s->set_kind(Slot::CPU);
    s->set_index(i);
  }
  for (int i = 0; i < cuda_slots; ++i) {
    Slot* s = r.add_slots();
    s->set_kind(Slot::CUDA);
    s->set_index(100 + i);
  }
  return r;
}

TEST(WorkerRegistry, RegisterGivesStableIdPerNode) {
  FakeClock clock;
  WorkerRegistry reg(&clock, absl::Seconds(10));
  auto a = reg.Register(Req("a", 2));
  auto b = reg.Register(Req("b", 2));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(*a, *b);
  auto a2 = reg.Register(Req("a", 4));
  ASSERT_TRUE(a2.ok());
  EXPECT_EQ(*a, *a2);
  EXPECT_EQ(reg.Get(*a)->slots_size(), 4);
  EXPECT_EQ(reg.List().size(), 2u);
}

TEST(WorkerRegistry, RegisterRejectsBadRequestsNamingTheField) {
  FakeClock clock;
  WorkerRegistry reg(&clock, absl::Seconds(10));
  auto no_name = reg.Register(Req("", 1));
  EXPECT_EQ(no_name.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(no_name.status().message().find("node_name"), std::string::npos);
  auto no_slots = reg.Register(Req("a", 0));
  EXPECT_EQ(no_slots.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(no_slots.status().message().find("slots"), std::string::npos);
  RegisterWorkerRequest dup = Req("a", 2);
  dup.mutable_slots(1)->set_index(0);
  auto d = reg.Register(dup);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(d.status().message().find("duplicate index 0"), std::string::npos);
  EXPECT_TRUE(reg.List().empty());
}

TEST(WorkerRegistry, SilentWorkerDiesAfterTimeoutAndMustReregister) {
  FakeClock clock;
  WorkerRegistry reg(&clock, absl::Seconds(10));
  const std::string a = *reg.Register(Req("a", 2));
  const std::string b = *reg.Register(Req("b", 2));
  ASSERT_TRUE(reg.Reserve(a, 0, "job-1").ok());
  clock.Advance(absl::Seconds(6));
  ASSERT_TRUE(reg.Heartbeat(b).ok());
  clock.Advance(absl::Seconds(5));  // a: 11 s silent, b: 5 s
  EXPECT_EQ(reg.ReapDead(), std::vector<std::string>{a});
  EXPECT_TRUE(reg.ReapDead().empty());  // reported once
  EXPECT_FALSE(reg.IsAlive(a));
  EXPECT_TRUE(reg.IsAlive(b));
  EXPECT_EQ(reg.Get(a)->state(), WorkerInfo::DEAD);
  EXPECT_EQ(reg.Get(a)->busy_slots(), 0);  // reservations dropped with it
  absl::Status hb = reg.Heartbeat(a);
  EXPECT_EQ(hb.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(hb.message().find("register again"), std::string::npos);
  EXPECT_EQ(reg.Heartbeat("w999").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(reg.Reserve(a, 1, "job-2").code(), absl::StatusCode::kFailedPrecondition);
  // Re-registration brings it back under the same id.
  EXPECT_EQ(*reg.Register(Req("a", 2)), a);
  EXPECT_TRUE(reg.IsAlive(a));
  EXPECT_TRUE(reg.Heartbeat(a).ok());
}

// #31 item 4: a live node's name is not taken over with the join token alone; its own daemon
// (current credential) re-registers, and a restarted one once the old registration is dead.
TEST(WorkerRegistry, AGapBetweenReapsIsTheCoordinatorsBlindnessNotTheWorkersSilence) {
  FakeClock clock;
  WorkerRegistry reg(&clock, absl::Seconds(10), /*blind_gap=*/absl::Seconds(5));
  const std::string a = *reg.Register(Req("a", 2));
  const std::string b = *reg.Register(Req("b", 2));
  ASSERT_TRUE(reg.Reserve(a, 0, "job-1").ok());
  for (int i = 0; i < 4; ++i) {  // ticks every second: a normal coordinator
    clock.Advance(absl::Seconds(1));
    ASSERT_TRUE(reg.ReapDead().empty());
    EXPECT_EQ(reg.blind_for(), absl::ZeroDuration());
  }
  ASSERT_TRUE(reg.Heartbeat(b).ok());
  clock.Advance(absl::Seconds(30));  // the coordinator stopped: no tick, no heartbeat
  EXPECT_TRUE(reg.ReapDead().empty());
  EXPECT_EQ(reg.blind_for(), absl::Seconds(30));
  EXPECT_TRUE(reg.IsAlive(a));
  EXPECT_EQ(reg.Get(a)->busy_slots(), 1);  // its job keeps its slot
  // One heartbeat timeout from the gap: b heartbeats again, a stays silent and then dies.
  for (int i = 0; i < 9; ++i) {
    clock.Advance(absl::Seconds(1));
    ASSERT_TRUE(reg.Heartbeat(b).ok());
    ASSERT_TRUE(reg.ReapDead().empty()) << "second " << i + 1;
  }
  EXPECT_EQ(reg.blind_for(), absl::ZeroDuration());
  clock.Advance(absl::Seconds(2));
  ASSERT_TRUE(reg.Heartbeat(b).ok());
  EXPECT_EQ(reg.ReapDead(), std::vector<std::string>{a});
  EXPECT_TRUE(reg.IsAlive(b));
}

TEST(WorkerRegistry, WithoutABlindGapALeapOfTheClockReapsAsBefore) {
  FakeClock clock;
  WorkerRegistry reg(&clock, absl::Seconds(10));  // off: the core's default
  const std::string a = *reg.Register(Req("a", 2));
  clock.Advance(absl::Seconds(30));
  EXPECT_EQ(reg.ReapDead(), std::vector<std::string>{a});
}

TEST(WorkerRegistry, ALiveNodeIsRegisteredAgainOnlyWithItsCurrentCredential) {
  FakeClock clock;
  WorkerRegistry reg(&clock, absl::Seconds(10));
  const std::string a = *reg.Register(Req("a", 2), Sha256Hex("cred-1"), "");
  ASSERT_TRUE(reg.Reserve(a, 0, "job-1").ok());
  clock.Advance(absl::Seconds(3));
  for (absl::string_view presented : {"", "guess"}) {
    auto taken = reg.Register(Req("a", 2), Sha256Hex("thief"), presented);
    EXPECT_EQ(taken.status().code(), absl::StatusCode::kPermissionDenied);
    EXPECT_NE(taken.status().message().find(
                  "RegisterWorker: node a is registered as worker " + a +
                  " and alive (last heartbeat 3s ago): registering it again needs that worker's "
                  "current credential"),
              std::string::npos)
        << taken.status();
  }
  // Nothing changed: the credential, the reservation.
  EXPECT_TRUE(reg.CheckCredential(a, "cred-1").ok());
  EXPECT_EQ(reg.Get(a)->busy_slots(), 1);
  // Its own daemon registering again: a new credential, reservations kept.
  EXPECT_EQ(*reg.Register(Req("a", 2), Sha256Hex("cred-2"), "cred-1"), a);
  EXPECT_TRUE(reg.CheckCredential(a, "cred-2").ok());
  EXPECT_EQ(reg.Get(a)->busy_slots(), 1);
  // A restarted daemon (no credential) is let in once the old registration is dead.
  clock.Advance(absl::Seconds(11));
  ASSERT_EQ(reg.ReapDead(), std::vector<std::string>{a});
  EXPECT_EQ(*reg.Register(Req("a", 2), Sha256Hex("cred-3"), ""), a);
  EXPECT_TRUE(reg.CheckCredential(a, "cred-3").ok());
  // A new node needs none.
  EXPECT_TRUE(reg.Register(Req("b", 1), Sha256Hex("b"), "").ok());
}

// A registration served but whose answer never reached the daemon (a half-open connection after
// a partition healed, #30): the daemon retries with the credential it presented, which is let
// in until the worker's first heartbeat shows the answer arrived.
TEST(WorkerRegistry, ARetryOfARegistrationWhoseAnswerWasLostIsLetIn) {
  FakeClock clock;
  WorkerRegistry reg(&clock, absl::Seconds(10));
  const std::string a = *reg.Register(Req("a", 2), Sha256Hex("cred-1"), "instance-secret");
  clock.Advance(absl::Seconds(1));
  // The answer (cred-1) was lost: the same daemon presents what it presented before.
  ASSERT_EQ(*reg.Register(Req("a", 2), Sha256Hex("cred-2"), "instance-secret"), a);
  EXPECT_TRUE(reg.CheckCredential(a, "cred-2").ok());
  EXPECT_FALSE(reg.CheckCredential(a, "cred-1").ok());
  // This answer arrived: the daemon heartbeats with cred-2, and the old secret stops working.
  ASSERT_TRUE(reg.Heartbeat(a).ok());
  auto late = reg.Register(Req("a", 2), Sha256Hex("cred-3"), "instance-secret");
  EXPECT_EQ(late.status().code(), absl::StatusCode::kPermissionDenied) << late.status();
  EXPECT_TRUE(reg.CheckCredential(a, "cred-2").ok());
  // Presenting none is never a predecessor: anyone with the join token can present none.
  const std::string b = *reg.Register(Req("b", 1), Sha256Hex("b-1"), "");
  EXPECT_EQ(reg.Register(Req("b", 1), Sha256Hex("b-2"), "").status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(reg.CheckCredential(b, "b-1").ok());
}

TEST(WorkerRegistry, FreeCapacityExcludesBusyDeadAndOtherKinds) {
  FakeClock clock;
  WorkerRegistry reg(&clock, absl::Seconds(10));
  const std::string a = *reg.Register(Req("a", 3, 2));
  const std::string b = *reg.Register(Req("b", 1));
  ASSERT_TRUE(reg.Reserve(a, 1, "job-1").ok());
  EXPECT_EQ(reg.Reserve(a, 1, "job-2").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(reg.Reserve(a, 42, "job-2").code(), absl::StatusCode::kNotFound);
  auto cpu = reg.FreeCapacity(Slot::CPU);
  ASSERT_EQ(cpu.size(), 2u);
  EXPECT_EQ(cpu[0].worker_id, a);
  EXPECT_EQ(cpu[0].free_slots, (std::vector<int32_t>{0, 2}));
  EXPECT_EQ(cpu[1].free_slots, (std::vector<int32_t>{0}));
  auto cuda = reg.FreeCapacity(Slot::CUDA);
  ASSERT_EQ(cuda.size(), 1u);
  EXPECT_EQ(cuda[0].free_slots, (std::vector<int32_t>{100, 101}));
  reg.ReleaseJob("job-1");
  EXPECT_EQ(reg.FreeCapacity(Slot::CPU)[0].free_slots.size(), 3u);
  clock.Advance(absl::Seconds(11));
  reg.ReapDead();
  EXPECT_TRUE(reg.FreeCapacity(Slot::CPU).empty());
}

TEST(WorkerRegistry, ConcurrentHeartbeatsKeepEveryWorkerAlive) {
  FakeClock clock;
  WorkerRegistry reg(&clock, absl::Seconds(10));
  constexpr int kWorkers = 64;
  std::vector<std::string> ids;
  for (int i = 0; i < kWorkers; ++i) ids.push_back(*reg.Register(Req(absl::StrCat("n", i), 1)));
  std::atomic<bool> stop{false};
  std::atomic<int> errors{0};
  std::atomic<int64_t> beats{0};
  constexpr int kThreads = 8;
  std::array<std::atomic<int64_t>, kThreads> rounds{};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      while (!stop.load()) {
        for (int i = t; i < kWorkers; i += kThreads) {
          if (!reg.Heartbeat(ids[i]).ok()) errors++;
          beats++;
        }
        rounds[t]++;
      }
    });
  }
  auto min_rounds = [&] {
    int64_t m = INT64_MAX;
    for (auto& r : rounds) m = std::min(m, r.load());
    return m;
  };
  // Time advances 20 s in all (twice the timeout) while the reaper runs; between two steps every
  // thread completes a round of heartbeats for its workers, so none may die.
  for (int i = 0; i < 200; ++i) {
    const int64_t before = min_rounds();
    while (min_rounds() <= before) std::this_thread::yield();
    clock.Advance(absl::Milliseconds(100));
    EXPECT_TRUE(reg.ReapDead().empty()) << "step " << i;
    reg.List();
  }
  stop = true;
  for (auto& th : threads) th.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_GE(beats.load(), 200 * kWorkers);
  EXPECT_EQ(reg.alive_count(), kWorkers);
  // And once they stop, all die together.
  clock.Advance(absl::Seconds(11));
  EXPECT_EQ(reg.ReapDead().size(), static_cast<size_t>(kWorkers));
}

TEST(WorkerRegistry, RestoreGivesAliveWorkersOneTimeoutToComeBack) {
  FakeClock clock;
  WorkerRegistry reg(&clock, absl::Seconds(10));
  WorkerInfo info;
  info.set_worker_id("w7");
  info.set_node_name("a");
  info.set_state(WorkerInfo::ALIVE);
  Slot* s = info.add_slots();
  s->set_kind(Slot::CPU);
  reg.Restore(info);
  EXPECT_TRUE(reg.IsAlive("w7"));
  EXPECT_EQ(*reg.Register(Req("a", 1)), "w7");
  EXPECT_EQ(*reg.Register(Req("b", 1)), "w8");  // ids continue after restored ones
  clock.Advance(absl::Seconds(11));
  EXPECT_EQ(reg.ReapDead().size(), 2u);
}

TEST(WorkerRegistry, ReservePlanReservesAllOrNothing) {
  FakeClock clock;
  WorkerRegistry reg(&clock, absl::Seconds(10));
  const std::string a = *reg.Register(Req("a", 2));
  ASSERT_TRUE(reg.Reserve(a, 1, "job-other/1").ok());
  Plan plan;
  for (int32_t rank : {0, 1}) {  // slot 1 is busy: the whole plan fails
    RankPlan r;
    r.rank = rank;
    r.worker_id = a;
    r.slot_index = rank;
    plan.ranks.push_back(r);
  }
  absl::Status s = reg.ReservePlan(plan, "job-1/1");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), absl::StrCat("slot 1 of worker ", a, " is busy with job-other/1"));
  ASSERT_EQ(reg.FreeCapacity(Slot::CPU).size(), 1u);
  EXPECT_EQ(reg.FreeCapacity(Slot::CPU)[0].free_slots, (std::vector<int32_t>{0}));  // released

  reg.ReleaseJob("job-other/1");
  ASSERT_TRUE(reg.ReservePlan(plan, "job-1/1").ok());
  EXPECT_TRUE(reg.FreeCapacity(Slot::CPU).empty());
}

}  // namespace
}  // namespace shardline::coordinator
