#include "trainer/config.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <string>

#include "trainer/lr_schedule.h"
#include "trainer/metrics.h"

namespace shardline::trainer {
namespace {

std::function<const char*(const char*)> FakeEnv(std::map<std::string, std::string> vars) {
  auto shared = std::make_shared<std::map<std::string, std::string>>(std::move(vars));
  return [shared](const char* name) -> const char* {
    auto it = shared->find(name);
    return it == shared->end() ? nullptr : it->second.c_str();
  };
}

TEST(ReadRankEnv, NothingSetIsOneProcess) {
  auto env = ReadRankEnv(FakeEnv({}));
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->rank, 0);
  EXPECT_EQ(env->world_size, 1);
  EXPECT_EQ(env->advertise_address, "127.0.0.1");
}

TEST(ReadRankEnv, ReadsTorchrunVariables) {
  auto env = ReadRankEnv(FakeEnv({{"RANK", "3"},
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

TEST(ReadRankEnv, RejectsBadValuesNamingTheVariable) {
  EXPECT_EQ(ReadRankEnv(FakeEnv({{"RANK", "x"}, {"WORLD_SIZE", "2"}})).status().message(),
            "environment RANK=\"x\" is not an integer");
  EXPECT_EQ(
      ReadRankEnv(
          FakeEnv({{"RANK", "4"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}}))
          .status()
          .message(),
      "environment RANK=4 is not in [0, WORLD_SIZE=4)");
  auto no_master = ReadRankEnv(FakeEnv({{"RANK", "0"}, {"WORLD_SIZE", "2"}}));
  EXPECT_EQ(no_master.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(no_master.status().message().find("needs MASTER_ADDR and MASTER_PORT"),
            std::string::npos);
  EXPECT_EQ(ReadRankEnv(FakeEnv({{"RANK", "0"}})).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Under the worker daemon the coordinator's rendezvous replaces MASTER_PORT.
  EXPECT_TRUE(ReadRankEnv(FakeEnv({{"RANK", "1"},
                                   {"WORLD_SIZE", "2"},
                                   {"SHARDLINE_COORDINATOR", "h:1"},
                                   {"SHARDLINE_RDZV_NAMESPACE", "job/1"}}))
                  .ok());
}

TEST(ReadRankEnv, TheBootstrapStoreNeedsASecretOnAndOffLoopback) {
  const std::map<std::string, std::string> remote = {
      {"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "10.1.2.3"}, {"MASTER_PORT", "29500"}};
  auto refused = ReadRankEnv(FakeEnv(remote));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find(
                "MASTER_ADDR=10.1.2.3 is not loopback and SHARDLINE_STORE_SECRET is unset"),
            std::string::npos)
      << refused.status();
  auto with_secret = remote;
  with_secret["SHARDLINE_STORE_SECRET"] = "abc";
  auto env = ReadRankEnv(FakeEnv(with_secret));
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->store_secret, "abc");
  auto insecure = remote;
  insecure["SHARDLINE_STORE_INSECURE"] = "1";
  EXPECT_TRUE(ReadRankEnv(FakeEnv(insecure)).ok());
  // Loopback needs one too: any local user can reach a loopback port.
  const std::map<std::string, std::string> local = {
      {"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"}};
  refused = ReadRankEnv(FakeEnv(local));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find(
                "MASTER_ADDR=127.0.0.1 is loopback (any local user can reach it) and "
                "SHARDLINE_STORE_SECRET is unset"),
            std::string::npos)
      << refused.status();
  auto local_secret = local;
  local_secret["SHARDLINE_STORE_SECRET"] = "abc";
  EXPECT_TRUE(ReadRankEnv(FakeEnv(local_secret)).ok());
  // One rank needs no store at all.
  EXPECT_TRUE(ReadRankEnv(FakeEnv({{"RANK", "0"}, {"WORLD_SIZE", "1"}})).ok());
}

TEST(ReadRankEnv, TorchrunSharingItsAgentStoreIsRefusedNamingTheFix) {
  const std::map<std::string, std::string> torchrun = {{"RANK", "1"},
                                                       {"WORLD_SIZE", "4"},
                                                       {"LOCAL_RANK", "1"},
                                                       {"MASTER_ADDR", "127.0.0.1"},
                                                       {"MASTER_PORT", "29500"},
                                                       {"SHARDLINE_STORE_SECRET", "s"},
                                                       {"TORCHELASTIC_USE_AGENT_STORE", "True"}};
  auto shared = ReadRankEnv(FakeEnv(torchrun));
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
  auto env = ReadRankEnv(FakeEnv(own));
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->master_port, 29500);
  // Under the worker daemon the coordinator's rendezvous is used: the variable does not matter.
  auto daemon = torchrun;
  daemon["SHARDLINE_COORDINATOR"] = "h:1";
  daemon["SHARDLINE_RDZV_NAMESPACE"] = "job-1/1";
  EXPECT_TRUE(ReadRankEnv(FakeEnv(daemon)).ok());
}

TEST(ReadRankEnv, RankGenerationOfAReplacementIsRead) {
  auto first = ReadRankEnv(FakeEnv({}));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->rank_generation, 0);
  auto replacement = ReadRankEnv(FakeEnv({{"SHARDLINE_RANK_GENERATION", "2"}}));
  ASSERT_TRUE(replacement.ok()) << replacement.status();
  EXPECT_EQ(replacement->rank_generation, 2);
  auto bad = ReadRankEnv(FakeEnv({{"SHARDLINE_RANK_GENERATION", "-1"}}));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "environment SHARDLINE_RANK_GENERATION=-1 is negative");
}

TEST(LoadTrainerConfig, ReplicaGroupFaultToleranceIsConverted) {
  RankEnv env;
  env.world_size = 4;
  auto plain = LoadTrainerConfig("examples/tiny_gpt_shakespeare.yaml", {}, env);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_FALSE(plain->replica_fault_tolerance);
  auto c =
      LoadTrainerConfig("examples/tiny_gpt_shakespeare.yaml",
                        {"fault_tolerance.mode=REPLICA_GROUPS", "fault_tolerance.min_replicas=1",
                         "fault_tolerance.digest_every_steps=5"},
                        env);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->replica_fault_tolerance);
  EXPECT_EQ(c->ft_min_replicas, 1);
  EXPECT_EQ(c->ft_digest_every_steps, 5);
}

TEST(LoadTrainerConfig, EnvironmentWorldSizeSetsLayoutAndAccumulation) {
  RankEnv env;
  env.world_size = 2;
  auto c =
      LoadTrainerConfig("examples/tiny_gpt_shakespeare.yaml", {"fsdp.hybrid_shard_degree=2"}, env);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->layout.world_size(), 2);
  EXPECT_EQ(c->layout.shard_degree(), 2);
  EXPECT_EQ(c->accumulation_steps, 2);  // 32 / (8 * 2).
  EXPECT_EQ(c->model.n_layer, 4);
  EXPECT_EQ(c->data_path[0], '/');
  EXPECT_NE(c->spec_yaml.find("hybrid_shard_degree: 2"), std::string::npos);

  env.world_size = 3;  // Degree 2 does not divide 3.
  auto bad = LoadTrainerConfig("examples/tiny_gpt_shakespeare.yaml", {}, env);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("fsdp.hybrid_shard_degree: 2 does not divide world_size 3"),
            std::string::npos)
      << bad.status();
}

// The engine's performance options reach the trainer config (the spec default keeps
// limit_all_gathers on and everything else off / fp32).
TEST(LoadTrainerConfig, EngineOptionsAreConverted) {
  RankEnv env;
  env.world_size = 2;
  auto d =
      LoadTrainerConfig("examples/tiny_gpt_shakespeare.yaml", {"fsdp.hybrid_shard_degree=2"}, env);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(d->engine.limit_all_gathers);
  EXPECT_FALSE(d->engine.activation_checkpointing);
  EXPECT_FALSE(d->fake_collectives);
  EXPECT_EQ(d->engine.param_dtype, fsdp::Dtype::kFloat32);
  EXPECT_EQ(d->engine.reduce_dtype, fsdp::Dtype::kFloat32);
  auto c = LoadTrainerConfig(
      "examples/tiny_gpt_shakespeare.yaml",
      {"fsdp.hybrid_shard_degree=2", "fsdp.limit_all_gathers=false",
       "fsdp.activation_checkpointing=true", "fsdp.fake_collectives=true",
       "fsdp.backward_prefetch=BACKWARD_POST", "fsdp.mixed_precision.param_dtype=BF16",
       "fsdp.mixed_precision.buffer_dtype=BF16"},
      env);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->engine.limit_all_gathers);
  EXPECT_TRUE(c->engine.activation_checkpointing);
  EXPECT_TRUE(c->fake_collectives);
  EXPECT_EQ(c->engine.backward_prefetch, fsdp::FsdpEngineOptions::BackwardPrefetch::kPost);
  EXPECT_EQ(c->engine.param_dtype, fsdp::Dtype::kBFloat16);
  EXPECT_EQ(c->engine.reduce_dtype, fsdp::Dtype::kFloat32);
  EXPECT_EQ(c->engine.buffer_dtype, fsdp::Dtype::kBFloat16);
}

// device.allow_tf32 reaches the trainer config (off by default; trainer_main applies it to
// at::globalContext() on CUDA jobs).
TEST(LoadTrainerConfig, AllowTf32IsOffUnlessTheSpecAsksForIt) {
  RankEnv env;
  env.world_size = 2;
  auto d =
      LoadTrainerConfig("examples/tiny_gpt_shakespeare.yaml", {"fsdp.hybrid_shard_degree=2"}, env);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_FALSE(d->allow_tf32);
  auto c = LoadTrainerConfig(
      "examples/tiny_gpt_shakespeare.yaml",
      {"fsdp.hybrid_shard_degree=2", "device.kind=CUDA", "device.allow_tf32=true"}, env);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->cuda);
  EXPECT_TRUE(c->allow_tf32);
}

TEST(LearningRateAt, WarmsUpThenDecaysToMinimum) {
  EXPECT_DOUBLE_EQ(LearningRateAt(0, 1.0, 0.1, 10, 110), 0.1);
  EXPECT_DOUBLE_EQ(LearningRateAt(9, 1.0, 0.1, 10, 110), 1.0);
  EXPECT_DOUBLE_EQ(LearningRateAt(10, 1.0, 0.1, 10, 110), 1.0);
  EXPECT_NEAR(LearningRateAt(60, 1.0, 0.1, 10, 110), 0.55, 1e-12);  // Half way: the mean.
  EXPECT_NEAR(LearningRateAt(109, 1.0, 0.1, 10, 110), 0.1, 1e-3);
  EXPECT_DOUBLE_EQ(LearningRateAt(500, 1.0, 0.1, 10, 110), 0.1);
  EXPECT_DOUBLE_EQ(LearningRateAt(5, 1.0, 1.0, 0, 10), 1.0);  // min_lr = lr: constant.
}

TEST(MetricsToJson, HasStepLossAndOptionalFields) {
  StepMetrics m;
  m.step = 7;
  m.loss = 2.5;
  m.val_loss = 2.25;
  m.sample = "a\"b\n\x1b\xc3\xa9";  // quote, newline, ESC, "é" in UTF-8
  m.grad_norm = NAN;
  const std::string json = MetricsToJson(m);
  EXPECT_NE(json.find("{\"step\": 7, \"loss\": 2.5,"), std::string::npos) << json;
  EXPECT_NE(json.find("\"val_loss\": 2.25"), std::string::npos) << json;
  EXPECT_NE(json.find("\"grad_norm\": null"), std::string::npos) << json;
  EXPECT_NE(json.find("\"sample\": \"a\\\"b\\n\\u001b\xc3\xa9\""), std::string::npos) << json;
  StepMetrics plain;
  EXPECT_EQ(MetricsToJson(plain).find("val_loss"), std::string::npos);
  EXPECT_EQ(MetricsToJson(plain).find("loss_scale"), std::string::npos);
  StepMetrics fp16;
  fp16.loss_scale = 32768;
  fp16.skipped_steps = 3;
  EXPECT_NE(MetricsToJson(fp16).find("\"loss_scale\": 32768, \"skipped_steps\": 3"),
            std::string::npos)
      << MetricsToJson(fp16);
}

TEST(MetricsWriter, WritesOneLinePerCall) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/m.jsonl";
  auto w = MetricsWriter::Open(path);
  ASSERT_TRUE(w.ok()) << w.status();
  StepMetrics m;
  m.step = 1;
  ASSERT_TRUE((*w)->Write(m).ok());
  m.step = 2;
  ASSERT_TRUE((*w)->Write(m).ok());
  std::ifstream in(path);
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) ++lines;
  EXPECT_EQ(lines, 2);
  EXPECT_EQ(MetricsWriter::Open("/no/such/dir/m.jsonl").status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_GT(CurrentRssBytes(), 0);
  EXPECT_GE(PeakRssBytes(), CurrentRssBytes());
}

}  // namespace
}  // namespace shardline::trainer
