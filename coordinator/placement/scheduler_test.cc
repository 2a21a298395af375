#include "coordinator/placement/scheduler.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace shardline::coordinator {
namespace {

JobSpec Spec(int w, int priority = 0, DeviceSpec::Kind device = DeviceSpec::CPU) {
  JobSpec spec;
  spec.set_world_size(w);
  spec.set_priority(priority);
  spec.mutable_device()->set_kind(device);
  spec.mutable_fsdp()->set_sharding_strategy(FsdpSpec::FULL_SHARD);
  return spec;
}

// `sizes[i]` free slots on node i (worker "w<i>", node "n<i>").
std::vector<NodeCapacity> Nodes(const std::vector<int>& sizes) {
  std::vector<NodeCapacity> nodes;
  for (size_t i = 0; i < sizes.size(); ++i) {
    NodeCapacity n;
    n.worker_id = absl::StrCat("w", i);
    n.node_name = absl::StrCat("n", i);
    for (int s = 0; s < sizes[i]; ++s) n.free_slots.push_back(s);
    nodes.push_back(n);
  }
  return nodes;
}

QueuedJob Queued(const std::string& id, const JobSpec* spec, int64_t seq, int32_t attempt = 0) {
  QueuedJob q;
  q.job_id = id;
  q.spec = spec;
  q.seq = seq;
  q.attempt = attempt;
  return q;
}

TEST(Scheduler, PriorityThenSubmissionOrderAndTheFirstMisfitBlocksItsKind) {
  const JobSpec low = Spec(2), high = Spec(2, /*priority=*/5), big = Spec(4, 1);
  const std::vector<Decision> d = Schedule({Queued("low", &low, 1), Queued("big", &big, 2),
                                            Queued("high", &high, 3), Queued("later", &low, 4)},
                                           {{Slot::CPU, Nodes({2, 1})}}, 0);
  ASSERT_EQ(d.size(), 2u);  // "low" and "later" wait behind "big" without a decision
  EXPECT_EQ(d[0].job_id, "high");
  EXPECT_EQ(d[0].action, Decision::kStart);
  EXPECT_EQ(d[0].plan.world_size, 2);
  EXPECT_EQ(d[1].job_id, "big");
  EXPECT_EQ(d[1].action, Decision::kWait);
  EXPECT_EQ(d[1].kind, Slot::CPU);
  // The slots "high" took are gone for "big": 1 left, on one worker.
  EXPECT_EQ(d[1].message, "waiting for 4 CPU slots (1 free on 1 live workers)");
}

TEST(Scheduler, PlacedJobsTakeTheirSlotsFromTheLaterOnes) {
  const JobSpec two = Spec(2);
  const std::vector<Decision> d =
      Schedule({Queued("a", &two, 1), Queued("b", &two, 2)}, {{Slot::CPU, Nodes({3, 1})}}, 0);
  ASSERT_EQ(d.size(), 2u);
  std::set<std::pair<std::string, int>> used;
  for (const Decision& x : d) {
    ASSERT_EQ(x.action, Decision::kStart) << x.job_id;
    for (const RankPlan& r : x.plan.ranks) {
      EXPECT_TRUE(used.insert({r.worker_id, r.slot_index}).second)
          << r.worker_id << "/" << r.slot_index << " given twice";
    }
  }
  EXPECT_EQ(used.size(), 4u);
}

TEST(Scheduler, DeviceKindsQueueSeparately) {
  const JobSpec gpu = Spec(2, 9, DeviceSpec::CUDA), cpu = Spec(1);
  const std::vector<Decision> d = Schedule({Queued("gpu", &gpu, 1), Queued("cpu", &cpu, 2)},
                                           {{Slot::CPU, Nodes({1})}, {Slot::CUDA, {}}}, 0);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].job_id, "gpu");
  EXPECT_EQ(d[0].action, Decision::kWait);
  EXPECT_EQ(d[0].kind, Slot::CUDA);
  EXPECT_EQ(d[0].message, "waiting for 2 CUDA slots (0 free on 0 live workers)");
  EXPECT_EQ(d[1].job_id, "cpu");
  EXPECT_EQ(d[1].action, Decision::kStart);
  EXPECT_EQ(SlotKindFor(gpu), Slot::CUDA);
  EXPECT_EQ(SlotKindFor(cpu), Slot::CPU);
}

TEST(Scheduler, JobInRestartBackoffIsSkippedWithoutBlockingItsKind) {
  const JobSpec two = Spec(2), one = Spec(1);
  QueuedJob backoff = Queued("backoff", &two, 1, /*attempt=*/1);
  backoff.restart_not_before_unix_ms = 5000;
  const std::vector<Decision> d =
      Schedule({backoff, Queued("next", &one, 2)}, {{Slot::CPU, Nodes({2})}}, 4999);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].job_id, "next");
  EXPECT_EQ(d[0].action, Decision::kStart);
  const std::vector<Decision> later = Schedule({backoff}, {{Slot::CPU, Nodes({2})}}, 5000);
  ASSERT_EQ(later.size(), 1u);
  EXPECT_EQ(later[0].action, Decision::kStart);
}

TEST(Scheduler, FirstAttemptIsAllOrNothingARestartMayShrink) {
  JobSpec elastic = Spec(4);
  elastic.mutable_elastic()->set_min_world_size(2);
  std::vector<Decision> d = Schedule({Queued("j", &elastic, 1)}, {{Slot::CPU, Nodes({3})}}, 0);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].action, Decision::kWait);
  EXPECT_EQ(d[0].message, "waiting for 4 CPU slots (3 free on 1 live workers)");
  d = Schedule({Queued("j", &elastic, 1, /*attempt=*/1)}, {{Slot::CPU, Nodes({3})}}, 0);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].action, Decision::kStart);
  EXPECT_EQ(d[0].plan.world_size, 3);
  EXPECT_EQ(d[0].plan.shard_degree, 3);  // FULL_SHARD at W = 3
}

TEST(Scheduler, JobOverItsOwnersRankQuotaWaitsWithoutBlockingOtherUsers) {
  const JobSpec two = Spec(2);
  QueuedJob bobs = Queued("bob2", &two, 1), alices = Queued("alice2", &two, 2);
  QueuedJob bobs_next = Queued("bob3", &two, 3);
  bobs.owner = bobs_next.owner = "bob";
  alices.owner = "alice";
  RankQuota quota;
  quota.max_per_user = 2;
  quota.running["bob"] = 1;
  const std::vector<Decision> d =
      Schedule({bobs, alices, bobs_next}, {{Slot::CPU, Nodes({4})}}, 0, quota);
  ASSERT_EQ(d.size(), 3u);
  // Fair order: alice runs nothing, bob 1 rank, so alice's job comes first.
  EXPECT_EQ(d[0].job_id, "alice2");
  EXPECT_EQ(d[0].action, Decision::kStart);
  EXPECT_EQ(d[1].job_id, "bob2");
  EXPECT_EQ(d[1].action, Decision::kWait);
  EXPECT_TRUE(d[1].quota);
  EXPECT_EQ(d[1].message,
            "waiting: user bob runs 1 ranks; this job's 2 would make it more than 2 "
            "(--max_running_ranks_per_user)");
  EXPECT_EQ(d[2].action, Decision::kWait);
  EXPECT_TRUE(d[2].quota);
  // Bob's quota wait does not block the kind: with alice's job ahead of it or behind it.
  quota.running["alice"] = 5;  // more than bob: bob's jobs are considered first
  quota.max_per_user = 0;      // no bound for alice; bob's own is 2
  quota.own["bob"] = {2, "--max_running_ranks_per_user"};
  const std::vector<Decision> behind =
      Schedule({bobs, alices, bobs_next}, {{Slot::CPU, Nodes({4})}}, 0, quota);
  ASSERT_EQ(behind.size(), 3u);
  EXPECT_EQ(behind[0].job_id, "bob2");
  EXPECT_TRUE(behind[0].quota);
  EXPECT_EQ(behind[1].job_id, "bob3");  // bob still runs fewer than alice
  EXPECT_TRUE(behind[1].quota);
  EXPECT_EQ(behind[2].job_id, "alice2");
  EXPECT_EQ(behind[2].action, Decision::kStart);
  // Ranks a round starts count for the owner's later jobs in the same round.
  RankQuota fresh;
  fresh.max_per_user = 2;
  const std::vector<Decision> e = Schedule({bobs, bobs_next}, {{Slot::CPU, Nodes({4})}}, 0, fresh);
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[0].action, Decision::kStart);
  EXPECT_EQ(e[1].action, Decision::kWait);
  EXPECT_EQ(e[1].message,
            "waiting: user bob runs 2 ranks; this job's 2 would make it more than 2 "
            "(--max_running_ranks_per_user)");
}

// Within one priority the next job is the oldest of the user running the fewest ranks, so a
// user with many queued jobs does not hold the slots from another user's first one; priority
// still comes first.
TEST(Scheduler, UsersOfOnePriorityAreServedFairlyByTheirRunningRanks) {
  const JobSpec one = Spec(1);
  JobSpec urgent = Spec(1);
  urgent.set_priority(5);
  QueuedJob a1 = Queued("a1", &one, 1), a2 = Queued("a2", &one, 2), a3 = Queued("a3", &one, 3);
  QueuedJob b1 = Queued("b1", &one, 4), c1 = Queued("c1", &urgent, 5);
  a1.owner = a2.owner = a3.owner = "alice";
  b1.owner = "bob";
  c1.owner = "carol";
  RankQuota running;
  running.running["alice"] = 2;
  // Two free slots: carol's higher priority first, then bob (0 running) before alice (2).
  std::vector<Decision> d = Schedule({a1, a2, a3, b1, c1}, {{Slot::CPU, Nodes({2})}}, 0, running);
  ASSERT_GE(d.size(), 3u);
  EXPECT_EQ(d[0].job_id, "c1");
  EXPECT_EQ(d[0].action, Decision::kStart);
  EXPECT_EQ(d[1].job_id, "b1");
  EXPECT_EQ(d[1].action, Decision::kStart);
  EXPECT_EQ(d[2].job_id, "a1");  // the oldest of alice's, and it waits: no slot left
  EXPECT_EQ(d[2].action, Decision::kWait);
  // Equal running ranks: submission order, alternating as each start counts.
  RankQuota none;
  d = Schedule({a1, a2, b1}, {{Slot::CPU, Nodes({3})}}, 0, none);
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d[0].job_id, "a1");
  EXPECT_EQ(d[1].job_id, "b1");  // alice now runs 1, bob 0
  EXPECT_EQ(d[2].job_id, "a2");
}

// A user's own bound (the users file) replaces the flag's for that user only, and the wait
// names where it came from.
TEST(Scheduler, AUsersOwnRankBoundReplacesTheFlagsForThatUser) {
  const JobSpec two = Spec(2);
  QueuedJob bobs = Queued("bob2", &two, 1), alices = Queued("alice2", &two, 2);
  bobs.owner = "bob";
  alices.owner = "alice";
  RankQuota quota;
  quota.max_per_user = 8;
  quota.own["bob"] = {1, "max_running_ranks of user bob in the users file"};
  const std::vector<Decision> d = Schedule({bobs, alices}, {{Slot::CPU, Nodes({4})}}, 0, quota);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].job_id, "bob2");
  EXPECT_EQ(d[0].action, Decision::kWait);
  EXPECT_EQ(d[0].message,
            "waiting: user bob runs 0 ranks; this job's 2 would make it more than 1 "
            "(max_running_ranks of user bob in the users file)");
  EXPECT_EQ(d[1].action, Decision::kStart);  // alice's bound is the flag's 8
}

// A running job holding `slots` slots of worker "w<node>" (slot indices from `first`).
RunningJob Running(const std::string& id, int priority, int64_t started, int node, int first,
                   int slots, bool preempting = false) {
  RunningJob r;
  r.job_id = id;
  r.priority = priority;
  r.started_unix_ms = started;
  NodeCapacity h;
  h.worker_id = absl::StrCat("w", node);
  h.node_name = absl::StrCat("n", node);
  for (int s = first; s < first + slots; ++s) h.free_slots.push_back(s);
  r.held.push_back(h);
  r.preempting = preempting;
  return r;
}

TEST(Scheduler, AWaitingJobPreemptsTheFewestLowerPriorityJobsLowestThenYoungestFirst) {
  // One node of 8 slots: 1 free; running: a (priority 0, 1 slot, young), b (priority 0, 4
  // slots, old), c (priority 1, 2 slots). "high" (priority 5) needs 4.
  const JobSpec high = Spec(4, 5);
  std::vector<NodeCapacity> free = Nodes({8});
  free[0].free_slots = {7};
  const std::vector<RunningJob> running = {
      Running("a", 0, 200, 0, 0, 1), Running("b", 0, 100, 0, 1, 4), Running("c", 1, 50, 0, 5, 2)};
  std::vector<Decision> d =
      Schedule({Queued("high", &high, 9)}, {{Slot::CPU, free}}, 0, {}, running);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].action, Decision::kPreempt);
  // "a" (lowest priority, youngest) was taken first but b's 4 slots alone place the job: only b.
  EXPECT_EQ(d[0].victims, (std::vector<std::string>{"b"}));
  EXPECT_EQ(d[0].message,
            "preempting lower-priority job(s) b: waiting for them to save a checkpoint and stop");

  // Once b is preempting, the next round waits for it rather than preempting more.
  std::vector<RunningJob> after = running;
  after[1].preempting = true;
  d = Schedule({Queued("high", &high, 9)}, {{Slot::CPU, free}}, 0, {}, after);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].action, Decision::kWait);
  EXPECT_EQ(d[0].message, "waiting for preempted job(s) b to save a checkpoint and stop");

  // Needing 6: a and b (lowest priority) before c.
  const JobSpec six = Spec(6, 5);
  d = Schedule({Queued("six", &six, 9)}, {{Slot::CPU, free}}, 0, {}, running);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].victims, (std::vector<std::string>{"a", "b"}));
}

TEST(Scheduler, NoPreemptionOfEqualOrHigherPriorityOrWhenItWouldNotPlaceTheJob) {
  const JobSpec job = Spec(4, 1);
  const std::vector<NodeCapacity> free;  // Every slot is held.
  // Equal priority: a plain wait.
  std::vector<Decision> d = Schedule({Queued("j", &job, 1)}, {{Slot::CPU, free}}, 0, {},
                                     {Running("same", 1, 0, 0, 0, 4)});
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].action, Decision::kWait);
  EXPECT_TRUE(d[0].victims.empty());
  // Lower priority, but too few slots even with it: nothing is preempted for nothing.
  d = Schedule({Queued("j", &job, 1)}, {{Slot::CPU, free}}, 0, {},
               {Running("small", 0, 0, 0, 0, 2)});
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].action, Decision::kWait);
  EXPECT_EQ(d[0].message, "waiting for 4 CPU slots (0 free on 0 live workers)");
  // A job over its owner's quota preempts nothing.
  RankQuota quota;
  quota.max_per_user = 2;
  QueuedJob q = Queued("j", &job, 1);
  q.owner = "bob";
  d = Schedule({q}, {{Slot::CPU, free}}, 0, quota, {Running("low", 0, 0, 0, 0, 4)});
  ASSERT_EQ(d.size(), 1u);
  EXPECT_NE(d[0].action, Decision::kPreempt);
  // Another device kind's job is no candidate.
  RunningJob gpu = Running("gpu", 0, 0, 0, 0, 4);
  gpu.kind = Slot::CUDA;
  d = Schedule({Queued("j", &job, 1)}, {{Slot::CPU, free}}, 0, {}, {gpu});
  EXPECT_EQ(d[0].action, Decision::kWait);
}

TEST(Scheduler, APreemptingJobBlocksItsKindForLaterJobs) {
  const JobSpec high = Spec(4, 5), small = Spec(1, 0);
  std::vector<NodeCapacity> free = Nodes({1});
  const std::vector<Decision> d =
      Schedule({Queued("high", &high, 1), Queued("small", &small, 2)}, {{Slot::CPU, free}}, 0, {},
               {Running("low", 0, 0, 0, 1, 3)});
  ASSERT_EQ(d.size(), 1u);  // "small" may not take the free slot "high" counts on
  EXPECT_EQ(d[0].action, Decision::kPreempt);
  EXPECT_EQ(d[0].victims, (std::vector<std::string>{"low"}));
}

TEST(Scheduler, SpecWithoutAValidLayoutIsUnplacedAndBlocksItsKind) {
  JobSpec bad = Spec(4);
  bad.mutable_fsdp()->set_hybrid_shard_degree(3);
  const JobSpec one = Spec(1);
  const std::vector<Decision> d =
      Schedule({Queued("bad", &bad, 1), Queued("one", &one, 2)}, {{Slot::CPU, Nodes({8})}}, 0);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].action, Decision::kUnplaced);
  EXPECT_EQ(d[0].error.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(d[0].error.message(), "fsdp.hybrid_shard_degree: 3 does not divide world_size 4");
}

TEST(Scheduler, StartedPlanIsRecordedAndDescribedForTheJob) {
  auto plan = PlanPlacement(4, 2, Nodes({2, 3}));
  ASSERT_TRUE(plan.ok()) << plan.status();
  JobStatus st;
  st.add_placement()->set_rank(7);  // an earlier attempt's placement is replaced
  RecordPlacement(*plan, &st);
  ASSERT_EQ(st.placement_size(), 4);
  for (int r = 0; r < 4; ++r) {
    const RankPlacement& p = st.placement(r);
    EXPECT_EQ(p.rank(), r);
    EXPECT_EQ(p.worker_id(), plan->ranks[r].worker_id);
    EXPECT_EQ(p.node_name(), plan->ranks[r].node_name);
    EXPECT_EQ(p.slot_index(), plan->ranks[r].slot_index);
    EXPECT_EQ(p.local_rank(), plan->ranks[r].local_rank);
    EXPECT_EQ(p.shard_group(), r / 2);
    EXPECT_EQ(p.replicate_group(), r % 2);
  }
  EXPECT_EQ(DescribePlan(*plan, 4), "4 ranks on 2 node(s), 2 shard group(s) of 2");
  EXPECT_EQ(DescribePlan(*plan, 6),
            "4 ranks on 2 node(s), 2 shard group(s) of 2; elastic: world shrunk from 6");
}

}  // namespace
}  // namespace shardline::coordinator
