#include "trainer/config.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <string>

#include "trainer/lr_schedule.h"
#include "trainer/metrics.h"

namespace shardline::trainer {
namespace {

TEST(LoadTrainerConfig, ReplicaGroupFaultToleranceIsConverted) {
  launch::RankEnv env;
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
  launch::RankEnv env;
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

  // The launch's world size beats a --set world_size too: it is the W this rank runs at.
  auto over = LoadTrainerConfig("examples/tiny_gpt_shakespeare.yaml",
                                {"world_size=8", "fsdp.hybrid_shard_degree=2"}, env);
  ASSERT_TRUE(over.ok()) << over.status();
  EXPECT_EQ(over->layout.world_size(), 2);
  EXPECT_NE(over->spec_yaml.find("world_size: 2"), std::string::npos) << over->spec_yaml;

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
  launch::RankEnv env;
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
  launch::RankEnv env;
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
