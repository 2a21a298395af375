#include "worker/trainer_env.h"

#include <gtest/gtest.h>

#include "launch/env_names.h"
#include "launch/rank_env.h"

namespace shardline::worker {
namespace {

Assignment Start(DeviceSpec::Kind device) {
  Assignment a;
  a.set_action(Assignment::START);
  a.set_job_id("job-1");
  a.set_attempt(2);
  a.set_rank(3);
  a.set_world_size(4);
  a.set_local_rank(1);
  a.set_local_world_size(2);
  a.set_slot_index(1);
  a.set_master_addr("10.0.0.7");
  a.set_rendezvous_namespace("job-1/2");
  a.set_rendezvous_secret("s3cret");
  a.set_resume_step(40);
  a.set_resume_from_job_id("job-0");
  a.set_generation(1);
  a.mutable_spec()->set_world_size(8);  // the submitted W; the attempt's is 4
  a.mutable_spec()->mutable_device()->set_kind(device);
  return a;
}

TrainerEnvNode Node() {
  TrainerEnvNode n;
  n.coordinator_address = "coord:7070";
  n.advertise_address = "10.0.0.8";
  n.node_name = "node-b";
  n.visible_devices = std::vector<std::string>{"4", "5"};
  n.nccl_ifname = "eth1";
  return n;
}

TEST(TrainerEnvFor, CarriesTheAssignmentAndTheNode) {
  absl::StatusOr<launch::RankEnv> e = TrainerEnvFor(Start(DeviceSpec::CPU), Node());
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->rank, 3);
  EXPECT_EQ(e->world_size, 4);  // the attempt's, not the spec's 8
  EXPECT_EQ(e->local_rank, 1);
  EXPECT_EQ(e->local_world_size, 2);
  EXPECT_EQ(e->master_addr, "10.0.0.7");
  EXPECT_EQ(e->coordinator, "coord:7070");
  EXPECT_EQ(e->job_id, "job-1");
  EXPECT_EQ(e->attempt, 2);
  EXPECT_EQ(e->rdzv_namespace, "job-1/2");
  EXPECT_EQ(e->rdzv_secret, "s3cret");
  EXPECT_EQ(e->resume_step, std::optional<int64_t>(40));
  EXPECT_EQ(e->resume_from_job, "job-0");
  EXPECT_EQ(e->rank_generation, 1);
  EXPECT_EQ(e->advertise_address, "10.0.0.8");
  EXPECT_EQ(e->node_name, "node-b");
  EXPECT_TRUE(e->open_roots.empty());
  // A CPU job gets no device variables: the daemon's own pass through.
  EXPECT_EQ(e->device.cuda_visible_devices, std::nullopt);
  EXPECT_EQ(e->device.nccl_socket_ifname, std::nullopt);
  // And the daemon's writer takes it as it is.
  absl::StatusOr<std::map<std::string, std::string>> written = launch::WriteRankEnv(*e);
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ(written->at(launch::kWorldSizeEnv), "4");
  EXPECT_EQ(written->at(launch::kResumeStepEnv), "40");
}

TEST(TrainerEnvFor, ACudaRankGetsItsSlotsDevice) {
  absl::StatusOr<launch::RankEnv> e = TrainerEnvFor(Start(DeviceSpec::CUDA), Node());
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->device.cuda_visible_devices, "5");
  EXPECT_EQ(e->device.cuda_device_order, std::nullopt);  // the inherited list keeps its order
  EXPECT_EQ(e->device.nccl_socket_ifname, "eth1");
  Assignment outside = Start(DeviceSpec::CUDA);
  outside.set_slot_index(2);
  EXPECT_EQ(TrainerEnvFor(outside, Node()).status().code(), absl::StatusCode::kOutOfRange);
}

TEST(TrainerEnvFor, OpenRootsOnlyWithBothKindsOfRoots) {
  TrainerEnvNode node = Node();
  node.path_policy.read_roots = {"/data"};
  absl::StatusOr<launch::RankEnv> e = TrainerEnvFor(Start(DeviceSpec::CPU), node);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_TRUE(e->open_roots.empty());
  node.path_policy.checkpoint_roots = {"/ckpt", "/scratch"};
  e = TrainerEnvFor(Start(DeviceSpec::CPU), node);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->open_roots, (std::vector<std::string>{"/data", "/ckpt", "/scratch"}));
}

TEST(TrainerEnvFor, WriteRootsAreTheCheckpointRootsWhetherOrNotReadsAreBounded) {
  TrainerEnvNode node = Node();
  absl::StatusOr<launch::RankEnv> e = TrainerEnvFor(Start(DeviceSpec::CPU), node);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_TRUE(e->write_roots.empty());
  node.path_policy.checkpoint_roots = {"/ckpt"};
  e = TrainerEnvFor(Start(DeviceSpec::CPU), node);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->write_roots, (std::vector<std::string>{"/ckpt"}));
  EXPECT_TRUE(e->open_roots.empty());  // reads stay unbounded without read roots
}

}  // namespace
}  // namespace shardline::worker
