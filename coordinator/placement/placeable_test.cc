#include "coordinator/placement/placeable.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace shardline::coordinator {
namespace {

WorkerInfo Worker(int cpu_slots, int cuda_slots, WorkerInfo::State state = WorkerInfo::ALIVE) {
  WorkerInfo w;
  w.set_state(state);
  for (int i = 0; i < cpu_slots + cuda_slots; ++i) {
    Slot* s = w.add_slots();
    s->set_index(i);
    s->set_kind(i < cpu_slots ? Slot::CPU : Slot::CUDA);
  }
  return w;
}

JobSpec Spec(int world, int min_world = 0, DeviceSpec::Kind kind = DeviceSpec::CPU) {
  JobSpec s;
  s.set_world_size(world);
  s.mutable_elastic()->set_min_world_size(min_world);
  s.mutable_device()->set_kind(kind);
  return s;
}

TEST(CheckPlaceable, AJobLargerThanTheAliveSlotsOfItsKindIsRefusedWithTheNumbers) {
  const std::vector<WorkerInfo> workers = {Worker(2, 0), Worker(2, 0),
                                           Worker(8, 0, WorkerInfo::DEAD)};
  EXPECT_TRUE(CheckPlaceable(Spec(4), workers, 0).ok());
  const absl::Status s = CheckPlaceable(Spec(5), workers, 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("world_size 5 needs 5 CPU slots; the 2 alive worker(s) offer 4"),
            std::string::npos)
      << s;
  EXPECT_NE(s.message().find("--max_world_size"), std::string::npos);
}

TEST(CheckPlaceable, SlotsOfAnotherKindDoNotCount) {
  const std::vector<WorkerInfo> workers = {Worker(4, 0)};
  const absl::Status s = CheckPlaceable(Spec(1, 0, DeviceSpec::CUDA), workers, 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("needs 1 CUDA slots; the 1 alive worker(s) offer 0 in all (0 with"),
            std::string::npos)
      << s;
  EXPECT_TRUE(CheckPlaceable(Spec(2, 0, DeviceSpec::CUDA), {Worker(0, 2)}, 0).ok());
}

TEST(CheckPlaceable, AnElasticJobNeedsOnlyItsMinimumWorld) {
  const std::vector<WorkerInfo> workers = {Worker(2, 0)};
  EXPECT_TRUE(CheckPlaceable(Spec(8, 2), workers, 0).ok());
  const absl::Status s = CheckPlaceable(Spec(8, 4), workers, 0);
  EXPECT_NE(s.message().find("elastic.min_world_size 4 needs 4 CPU slots"), std::string::npos) << s;
}

TEST(CheckPlaceable, BeforeAnyWorkerIsAliveEveryJobIsTaken) {
  EXPECT_TRUE(CheckPlaceable(Spec(64), {}, 0).ok());
  EXPECT_TRUE(CheckPlaceable(Spec(64), {Worker(2, 0, WorkerInfo::DEAD)}, 0).ok());
}

TEST(CheckPlaceable, AFixedBoundReplacesTheAliveSlotsAndMinusOneTurnsTheCheckOff) {
  const std::vector<WorkerInfo> workers = {Worker(2, 0)};
  EXPECT_TRUE(CheckPlaceable(Spec(16), workers, 16).ok());  // the cluster will grow
  const absl::Status s = CheckPlaceable(Spec(17), workers, 16);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("world_size 17 is above this cluster's bound of 16 ranks "
                             "(--max_world_size)"),
            std::string::npos)
      << s;
  EXPECT_TRUE(CheckPlaceable(Spec(1000), workers, -1).ok());
}

}  // namespace
}  // namespace shardline::coordinator
