#include "spec/proto_yaml.h"

#include <gtest/gtest.h>

#include "proto/job_spec.pb.h"

namespace shardline::spec {
namespace {

TEST(MergeYamlText, ParsesNestedFieldsEnumsAndRecordsWrittenPaths) {
  JobSpec spec;
  FieldPaths written;
  ASSERT_TRUE(MergeYamlText("world_size: 4\n"
                            "fsdp:\n  sharding_strategy: HYBRID_SHARD\n  hybrid_shard_degree: 2\n"
                            "optimizer: {kind: sgd, grad_clip: 0}\n"
                            "model: {init_seed: 18446744073709551615, dropout: 0.25}\n",
                            "t.yaml", &spec, &written)
                  .ok());
  EXPECT_EQ(spec.world_size(), 4);
  EXPECT_EQ(spec.fsdp().sharding_strategy(), FsdpSpec::HYBRID_SHARD);
  EXPECT_EQ(spec.fsdp().hybrid_shard_degree(), 2);
  EXPECT_EQ(spec.optimizer().kind(), OptimizerSpec::SGD);
  EXPECT_EQ(spec.model().init_seed(), 18446744073709551615ULL);
  EXPECT_FLOAT_EQ(spec.model().dropout(), 0.25f);
  EXPECT_EQ(written.count("optimizer.grad_clip"), 1u);  // Written even though zero.
  EXPECT_EQ(written.count("optimizer.lr"), 0u);
}

TEST(MergeYamlText, AcceptsJson) {
  JobSpec spec;
  ASSERT_TRUE(MergeYamlText(R"({"name": "j", "train": {"steps": 7, "deterministic": true}})",
                            "t.json", &spec, nullptr)
                  .ok());
  EXPECT_EQ(spec.name(), "j");
  EXPECT_EQ(spec.train().steps(), 7);
  EXPECT_TRUE(spec.train().deterministic());
}

TEST(MergeYamlText, WrongTypeNamesPathValueAndLine) {
  JobSpec spec;
  const absl::Status s =
      MergeYamlText("name: x\nmodel:\n  n_head: \"abc\"\n", "job.yaml", &spec, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "job.yaml:3: model.n_head: \"abc\" is not an integer");
}

TEST(MergeYamlText, UnknownFieldSuggestsClosestName) {
  JobSpec spec;
  const absl::Status s = MergeYamlText("fsdp:\n  shard_degre: 2\n", "job.yaml", &spec, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      s.message(),
      "job.yaml:2: unknown field \"fsdp.shard_degre\" (did you mean \"hybrid_shard_degree\"?)");
  EXPECT_EQ(SuggestFieldName(*ModelSpec::descriptor(), "n_heads"), "n_head");
  EXPECT_EQ(SuggestFieldName(*ModelSpec::descriptor(), "zzzzzz"), "");
}

TEST(MergeYamlText, UnknownFieldWithAPyTorchOrDeepSpeedNameGetsShardlinesName) {
  JobSpec spec;
  EXPECT_EQ(MergeYamlText("fsdp:\n  transformer_layer_cls: Block\n", "job.yaml", &spec, nullptr)
                .message(),
            "job.yaml:2: unknown field \"fsdp.transformer_layer_cls\" (did you mean "
            "\"block_class\"? PyTorch FSDP's transformer_layer_cls: the block class's name)");
  // The nearest spelling would be "steps", which is not what accumulation means.
  EXPECT_EQ(MergeYamlText("train:\n  gradient_accumulation_steps: 4\n", "job.yaml", &spec, nullptr)
                .message(),
            "job.yaml:2: unknown field \"train.gradient_accumulation_steps\" (no such field: the "
            "micro-batches per step follow from train.global_batch_size / "
            "(train.micro_batch_size * world_size))");
  EXPECT_EQ(ApplyAssignment("optimizer.betas=[0.9, 0.95]", &spec, nullptr).message(),
            "unknown field \"optimizer.betas\" (\"beta1\" and \"beta2\", two fields) (from --set "
            "optimizer.betas=[0.9, 0.95])");
  EXPECT_EQ(ApplyAssignment("checkpoint.save_interval=100", &spec, nullptr).message(),
            "unknown field \"checkpoint.save_interval\" (did you mean \"every_steps\"?) (from "
            "--set checkpoint.save_interval=100)");
  // A name foreign to one message is an ordinary typo in another.
  EXPECT_EQ(ApplyAssignment("model.betas=1", &spec, nullptr).message(),
            "unknown field \"model.betas\" (from --set model.betas=1)");
}

TEST(MergeYamlText, RejectsNullDuplicateOutOfRangeAndBadSyntax) {
  JobSpec spec;
  EXPECT_EQ(MergeYamlText("world_size:\n", "a", &spec, nullptr).message(),
            "a:1: world_size: has no value");
  EXPECT_EQ(MergeYamlText("world_size: 1\nworld_size: 2\n", "a", &spec, nullptr).message(),
            "a:2: world_size: given twice");
  EXPECT_EQ(MergeYamlText("world_size: 3000000000\n", "a", &spec, nullptr).message(),
            "a:1: world_size: \"3000000000\" is out of range for int32");
  EXPECT_EQ(MergeYamlText("model: {init_seed: -1}\n", "a", &spec, nullptr).message(),
            "a:1: model.init_seed: \"-1\" is out of range for uint64");
  EXPECT_EQ(MergeYamlText("world_size: 2.5\n", "a", &spec, nullptr).message(),
            "a:1: world_size: \"2.5\" is not an integer");
  EXPECT_EQ(MergeYamlText("model: 3\n", "a", &spec, nullptr).message(),
            "a:1: model: \"3\" is not a mapping of field names to values");
  const absl::Status syntax = MergeYamlText("model: [1,\n", "a", &spec, nullptr);
  EXPECT_EQ(syntax.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(syntax.message().find("not valid YAML or JSON"), absl::string_view::npos);
}

TEST(MergeYamlText, EnumErrorListsValidNames) {
  JobSpec spec;
  EXPECT_EQ(MergeYamlText("optimizer: {kind: LION}\n", "a", &spec, nullptr).message(),
            "a:1: optimizer.kind: \"LION\" is not one of ADAMW, SGD");
}

TEST(ApplyAssignment, SetsScalarsAndMergesMessages) {
  JobSpec spec;
  FieldPaths written;
  ASSERT_TRUE(ApplyAssignment("fsdp.hybrid_shard_degree=3", &spec, &written).ok());
  ASSERT_TRUE(ApplyAssignment("model={n_layer: 2, n_head: 2}", &spec, &written).ok());
  ASSERT_TRUE(ApplyAssignment("name=007", &spec, &written).ok());
  ASSERT_TRUE(ApplyAssignment("train.sample_prompt=a=b", &spec, &written).ok());
  EXPECT_EQ(spec.fsdp().hybrid_shard_degree(), 3);
  EXPECT_EQ(spec.model().n_layer(), 2);
  EXPECT_EQ(spec.name(), "007");
  EXPECT_EQ(spec.train().sample_prompt(), "a=b");
  EXPECT_EQ(written.count("model.n_head"), 1u);
}

TEST(ApplyAssignment, ErrorsNameThePathAndValue) {
  JobSpec spec;
  EXPECT_EQ(ApplyAssignment("fsdp.hybrid_shard_degree=x", &spec, nullptr).message(),
            "fsdp.hybrid_shard_degree: \"x\" is not an integer (from --set "
            "fsdp.hybrid_shard_degree=x)");
  EXPECT_EQ(ApplyAssignment("fsdp.shard_degre=2", &spec, nullptr).message(),
            "unknown field \"fsdp.shard_degre\" (did you mean \"hybrid_shard_degree\"?) (from "
            "--set fsdp.shard_degre=2)");
  EXPECT_EQ(ApplyAssignment("world_size.x=2", &spec, nullptr).message(),
            "world_size: is not a section, so \"world_size.x\" names nothing (from --set "
            "world_size.x=2)");
  EXPECT_EQ(ApplyAssignment("novalue", &spec, nullptr).message(),
            "--set \"novalue\": expected path=value, e.g. fsdp.hybrid_shard_degree=2");
}

TEST(MessageToYaml, OmitsZeroFieldsAndKeepsFullPrecision) {
  JobSpec spec;
  spec.mutable_optimizer()->set_lr(0.1 + 0.2);  // Not representable in 6 digits.
  spec.mutable_model()->set_dropout(0.1f);
  spec.mutable_optimizer()->set_min_lr(0.1);
  const std::string text = MessageToYaml(spec);
  EXPECT_EQ(text.find("world_size"), std::string::npos);
  EXPECT_NE(text.find("min_lr: 0.1\n"), std::string::npos) << text;  // Shortest exact form.
  EXPECT_NE(text.find("dropout: 0.1\n"), std::string::npos) << text;
  JobSpec back;
  ASSERT_TRUE(MergeYamlText(text, "round", &back, nullptr).ok()) << text;
  EXPECT_EQ(back.optimizer().lr(), 0.1 + 0.2);
  EXPECT_EQ(back.model().dropout(), 0.1f);
}

}  // namespace
}  // namespace shardline::spec
