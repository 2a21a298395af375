// The trainer's reading of its launch environment: launch::ReadRankEnv's refusals are tested in
// launch/rank_env_test.cc; here, what the trainer adds (the standalone store's requirements, this
// host's defaults).
#include "trainer/launch_env.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>

namespace shardline::trainer {
namespace {

std::function<const char*(const char*)> FakeEnv(std::map<std::string, std::string> vars) {
  auto shared = std::make_shared<std::map<std::string, std::string>>(std::move(vars));
  return [shared](const char* name) -> const char* {
    auto it = shared->find(name);
    return it == shared->end() ? nullptr : it->second.c_str();
  };
}

TEST(ReadLaunchEnv, NothingSetIsOneProcess) {
  auto env = ReadLaunchEnv(FakeEnv({}));
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->rank, 0);
  EXPECT_EQ(env->world_size, 1);
  EXPECT_EQ(env->advertise_address, "127.0.0.1");
}

TEST(ReadLaunchEnv, ReadsTorchrunVariables) {
  auto env = ReadLaunchEnv(FakeEnv({{"RANK", "3"},
                                    {"WORLD_SIZE", "4"},
                                    {"LOCAL_RANK", "1"},
                                    {"MASTER_ADDR", "127.0.0.1"},
                                    {"MASTER_PORT", "29500"},
                                    {"SHARDLINE_STORE_SECRET", "s"}}));
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->rank, 3);
  EXPECT_EQ(env->world_size, 4);
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->master_port, 29500);
}

TEST(ReadLaunchEnv, RejectsBadValuesNamingTheVariable) {
  EXPECT_EQ(ReadLaunchEnv(FakeEnv({{"RANK", "x"}, {"WORLD_SIZE", "2"}})).status().message(),
            "environment RANK=\"x\" is not an integer");
  EXPECT_EQ(
      ReadLaunchEnv(
          FakeEnv({{"RANK", "4"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}}))
          .status()
          .message(),
      "environment RANK=4 is not in [0, WORLD_SIZE=4)");
  auto no_master = ReadLaunchEnv(FakeEnv({{"RANK", "0"}, {"WORLD_SIZE", "2"}}));
  EXPECT_EQ(no_master.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(no_master.status().message().find("needs MASTER_ADDR and MASTER_PORT"),
            std::string::npos);
  EXPECT_EQ(ReadLaunchEnv(FakeEnv({{"RANK", "0"}})).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Under the worker daemon the coordinator's rendezvous replaces MASTER_PORT.
  EXPECT_TRUE(ReadLaunchEnv(FakeEnv({{"RANK", "1"},
                                     {"WORLD_SIZE", "2"},
                                     {"SHARDLINE_COORDINATOR", "h:1"},
                                     {"SHARDLINE_RDZV_NAMESPACE", "job/1"}}))
                  .ok());
}

TEST(ReadLaunchEnv, TheBootstrapStoreNeedsASecretOnAndOffLoopback) {
  const std::map<std::string, std::string> remote = {
      {"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "10.1.2.3"}, {"MASTER_PORT", "29500"}};
  auto refused = ReadLaunchEnv(FakeEnv(remote));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find(
                "MASTER_ADDR=10.1.2.3 is not loopback and SHARDLINE_STORE_SECRET is unset"),
            std::string::npos)
      << refused.status();
  auto with_secret = remote;
  with_secret["SHARDLINE_STORE_SECRET"] = "abc";
  auto env = ReadLaunchEnv(FakeEnv(with_secret));
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->store_secret, "abc");
  auto insecure = remote;
  insecure["SHARDLINE_STORE_INSECURE"] = "1";
  EXPECT_TRUE(ReadLaunchEnv(FakeEnv(insecure)).ok());
  // Loopback needs one too: any local user can reach a loopback port.
  const std::map<std::string, std::string> local = {
      {"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"}};
  refused = ReadLaunchEnv(FakeEnv(local));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find(
                "MASTER_ADDR=127.0.0.1 is loopback (any local user can reach it) and "
                "SHARDLINE_STORE_SECRET is unset"),
            std::string::npos)
      << refused.status();
  auto local_secret = local;
  local_secret["SHARDLINE_STORE_SECRET"] = "abc";
  EXPECT_TRUE(ReadLaunchEnv(FakeEnv(local_secret)).ok());
  // One rank needs no store at all.
  EXPECT_TRUE(ReadLaunchEnv(FakeEnv({{"RANK", "0"}, {"WORLD_SIZE", "1"}})).ok());
}

TEST(ReadLaunchEnv, TorchrunSharingItsAgentStoreIsRefusedNamingTheFix) {
  const std::map<std::string, std::string> torchrun = {{"RANK", "1"},
                                                       {"WORLD_SIZE", "4"},
                                                       {"LOCAL_RANK", "1"},
                                                       {"MASTER_ADDR", "127.0.0.1"},
                                                       {"MASTER_PORT", "29500"},
                                                       {"SHARDLINE_STORE_SECRET", "s"},
                                                       {"TORCHELASTIC_USE_AGENT_STORE", "True"}};
  auto shared = ReadLaunchEnv(FakeEnv(torchrun));
  EXPECT_EQ(shared.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(shared.status().message(),
            "environment TORCHELASTIC_USE_AGENT_STORE=True: torchrun's agent serves its own "
            "store on MASTER_PORT=29500, which rank 0 needs for Shardline's bootstrap store; "
            "launch with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 in torchrun's environment (and the "
            "c10d rendezvous: the default, or --standalone), so that torchrun hands the ranks a "
            "free MASTER_PORT");
  // What torchrun sets with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1.
  auto own = torchrun;
  own["TORCHELASTIC_USE_AGENT_STORE"] = "False";
  auto env = ReadLaunchEnv(FakeEnv(own));
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->master_port, 29500);
  // Under the worker daemon the coordinator's rendezvous is used: the variable does not matter.
  auto daemon = torchrun;
  daemon["SHARDLINE_COORDINATOR"] = "h:1";
  daemon["SHARDLINE_RDZV_NAMESPACE"] = "job-1/1";
  EXPECT_TRUE(ReadLaunchEnv(FakeEnv(daemon)).ok());
}

TEST(ReadLaunchEnv, OpenRootsAreNormalizedAndTheNodeNameDefaultsToTheHost) {
  auto env = ReadLaunchEnv(FakeEnv({{"SHARDLINE_OPEN_ROOTS", "/data/./in/,/ckpt//job/../x"}}));
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->open_roots, (std::vector<std::string>{"/data/in", "/ckpt/x"}));
  EXPECT_FALSE(env->node_name.empty());
  env = ReadLaunchEnv(FakeEnv({{"SHARDLINE_NODE_NAME", "node-b"},
                               {"SHARDLINE_ADVERTISE_ADDRESS", "10.0.0.8"},
                               {"MASTER_ADDR", "10.0.0.7"}}));
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->node_name, "node-b");
  EXPECT_EQ(env->advertise_address, "10.0.0.8");
}

TEST(ReadLaunchEnv, RefusalsOfTheLaunchReaderComeThrough) {
  auto env = ReadLaunchEnv(FakeEnv({{"SHARDLINE_RESUME_STEP", "4x"}}));
  EXPECT_EQ(env.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(env.status().message(), "environment SHARDLINE_RESUME_STEP=\"4x\" is not an integer");
}

}  // namespace
}  // namespace shardline::trainer
