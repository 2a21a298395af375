#include "spec/job_spec.h"

#include <gtest/gtest.h>

#include <google/protobuf/unknown_field_set.h>
#include <google/protobuf/util/message_differencer.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "spec/model_presets.h"
#include "spec/validate.h"

namespace shardline::spec {
namespace {

using google::protobuf::util::MessageDifferencer;

// A valid spec; each bad case below changes it by overrides or replaces it.
constexpr char kBase[] = R"(
name: base
world_size: 4
model: {preset: tiny}
data: {path: data/tinyshakespeare.txt}
fsdp: {sharding_strategy: HYBRID_SHARD, hybrid_shard_degree: 2}
train: {global_batch_size: 32, micro_batch_size: 4}
)";

absl::StatusOr<JobSpec> Load(const std::string& text, std::vector<std::string> sets = {}) {
  LoadOptions opts;
  opts.overrides = std::move(sets);
  return LoadJobSpecText(text, "job.yaml", opts);
}

TEST(LoadJobSpec, BaseSpecIsValidAndDefaulted) {
  auto spec = Load(kBase);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->model().architecture(), ModelSpec::GPT);
  EXPECT_EQ(spec->model().n_embd(), 64);
  EXPECT_EQ(spec->data().seq_len(), 64);  // = block_size.
  EXPECT_EQ(spec->optimizer().kind(), OptimizerSpec::ADAMW);
  EXPECT_DOUBLE_EQ(spec->optimizer().min_lr(), 3e-5);
  EXPECT_DOUBLE_EQ(spec->optimizer().grad_clip(), 1.0);
  EXPECT_EQ(spec->device().kind(), DeviceSpec::CPU);
  EXPECT_EQ(spec->data().path()[0], '/');  // Made absolute.
}

TEST(LoadJobSpec, ExplicitZeroKeepsMeaningfulZeroDefaultsOff) {
  auto spec = Load(std::string(kBase) + "optimizer: {grad_clip: 0, weight_decay: 0}\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->optimizer().grad_clip(), 0);
  EXPECT_EQ(spec->optimizer().weight_decay(), 0);
}

// The trainer's hook for its launch's world size: after the --set overrides (so it beats a
// --set world_size), before the defaults that depend on it and validation.
TEST(LoadJobSpec, AfterOverridesHookRunsBeforeDefaultsAndValidation) {
  LoadOptions opts;
  opts.overrides = {"world_size=8"};
  int seen = 0;
  opts.after_overrides = [&seen](JobSpec* spec) {
    seen = spec->world_size();
    spec->set_world_size(2);
  };
  // Without a written global batch size the default is micro_batch_size * world_size.
  auto spec = LoadJobSpecText(absl::StrReplaceAll(kBase, {{"global_batch_size: 32, ", ""}}),
                              "job.yaml", opts);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(seen, 8);
  EXPECT_EQ(spec->world_size(), 2);
  EXPECT_EQ(spec->train().global_batch_size(), 8);  // 4 * 2, not 4 * 8
  // Validation sees the hook's value, not the spec's 4 (which degree 2 divides).
  opts.overrides.clear();
  opts.after_overrides = [](JobSpec* spec) { spec->set_world_size(3); };
  auto bad = LoadJobSpecText(kBase, "job.yaml", opts);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("world_size 3"), std::string::npos) << bad.status();
}

TEST(LoadJobSpec, OverridesApplyBeforeValidation) {
  // Degree 4 divides 4; alone degree 3 would not. The override path must win over the file.
  auto spec = Load(kBase, {"fsdp.hybrid_shard_degree=4", "train.steps=5"});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->fsdp().hybrid_shard_degree(), 4);
  EXPECT_EQ(spec->train().steps(), 5);
  auto bad = Load(kBase, {"fsdp.hybrid_shard_degree=3"});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "fsdp.hybrid_shard_degree: 3 does not divide world_size 4");
}

// The engine's performance options load as written (they used to be refused).
TEST(LoadJobSpec, EnginePerformanceOptionsAreAccepted) {
  auto spec = Load(
      kBase, {"fsdp.activation_checkpointing=true", "fsdp.fake_collectives=true",
              "fsdp.limit_all_gathers=false", "fsdp.forward_prefetch=true",
              "fsdp.backward_prefetch=BACKWARD_POST", "fsdp.mixed_precision.param_dtype=BF16",
              "fsdp.mixed_precision.reduce_dtype=FP32", "fsdp.mixed_precision.buffer_dtype=BF16"});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(spec->fsdp().activation_checkpointing());
  EXPECT_TRUE(spec->fsdp().fake_collectives());
  EXPECT_FALSE(spec->fsdp().limit_all_gathers());
  EXPECT_EQ(spec->fsdp().backward_prefetch(), FsdpSpec::BACKWARD_POST);
  EXPECT_EQ(spec->fsdp().mixed_precision().param_dtype(), FsdpSpec::BF16);
  EXPECT_EQ(spec->fsdp().mixed_precision().reduce_dtype(), FsdpSpec::FP32);
  EXPECT_EQ(spec->fsdp().mixed_precision().buffer_dtype(), FsdpSpec::BF16);
}

// FP16 runs on CPU jobs too (LibTorch's CPU fp16 kernels give the fp32 losses within 3e-5 on
// the tiny GPT, ~4x slower than fp32: trainer/engine_options_test.sh), in any of the
// three fields, with the dynamic loss scaler.
TEST(LoadJobSpec, Fp16IsAcceptedOnCpuJobs) {
  auto spec = Load(
      kBase, {"fsdp.mixed_precision.param_dtype=FP16", "fsdp.mixed_precision.reduce_dtype=FP16",
              "fsdp.mixed_precision.buffer_dtype=FP16"});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->device().kind(), DeviceSpec::CPU);
  EXPECT_EQ(spec->fsdp().mixed_precision().param_dtype(), FsdpSpec::FP16);
  EXPECT_EQ(spec->fsdp().mixed_precision().reduce_dtype(), FsdpSpec::FP16);
  EXPECT_EQ(spec->fsdp().mixed_precision().buffer_dtype(), FsdpSpec::FP16);
}

// CPU offload is built for CUDA jobs (a CPU job keeps refusing it: see the table below).
TEST(LoadJobSpec, CpuOffloadIsAcceptedOnCudaJobs) {
  auto spec = Load(kBase, {"device.kind=CUDA", "fsdp.cpu_offload=true"});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(spec->fsdp().cpu_offload());
}

// TensorFloat-32 is opt-in for CUDA jobs (a CPU job refuses it: see the table below).
TEST(LoadJobSpec, AllowTf32IsOffByDefaultAndAcceptedOnCudaJobs) {
  auto plain = Load(kBase, {"device.kind=CUDA"});
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_FALSE(plain->device().allow_tf32());
  auto spec = Load(kBase, {"device.kind=CUDA", "device.allow_tf32=true"});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(spec->device().allow_tf32());
}

struct BadSpec {
  const char* label;
  std::string text;  // Empty: kBase.
  std::vector<std::string> sets;
  const char* expected;  // Substring of the error message.
};

TEST(LoadJobSpec, RejectsBadSpecsWithFieldAndValue) {
  const std::vector<BadSpec> cases = {
      {"wrong type",
       "model: {n_head: \"abc\"}",
       {},
       "job.yaml:1: model.n_head: \"abc\" is not an integer"},
      {"unknown field",
       "fsdp: {shard_degre: 2}",
       {},
       "unknown field \"fsdp.shard_degre\" (did you mean \"hybrid_shard_degree\"?)"},
      {"unknown top-level",
       "wrld_size: 2",
       {},
       "unknown field \"wrld_size\" (did you mean \"world_size\"?)"},
      {"bad enum",
       "",
       {"fsdp.sharding_strategy=FULL"},
       "fsdp.sharding_strategy: \"FULL\" is not one of FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, "
       "HYBRID_SHARD, HYBRID_SHARD_ZERO2"},
      {"degree does not divide",
       "",
       {"fsdp.hybrid_shard_degree=5"},
       "fsdp.hybrid_shard_degree: 5 does not divide world_size 4"},
      {"degree one", "", {"fsdp.hybrid_shard_degree=1"}, "fsdp.hybrid_shard_degree: 1"},
      {"batch not divisible",
       "",
       {"train.global_batch_size=12"},
       "train.global_batch_size: 12 is not divisible by micro_batch_size * world_size = 4 * 4 = "
       "16"},
      {"seq_len too long", "", {"data.seq_len=65"}, "data.seq_len: 65 exceeds model.block_size 64"},
      {"n_embd not divisible",
       "",
       {"model.n_head=5"},
       "model.n_embd: 64 is not divisible by model.n_head 5"},
      {"vocab too small",
       "",
       {"model.vocab_size=100"},
       "model.vocab_size: 100 is below 256, which the byte-level tokenizer of TEXT data needs"},
      {"missing data file",
       "",
       {"data.path=no/such/file.txt"},
       "/no/such/file.txt\" does not exist"},
      {"no data path",
       "name: x\nmodel: {preset: tiny}\n",
       {},
       "data.path: must name the training data file"},
      {"cpu offload on cpu",
       "",
       {"fsdp.cpu_offload=true"},
       "fsdp.cpu_offload: true needs device.kind CUDA"},
      {"tf32 on cpu",
       "",
       {"device.allow_tf32=true"},
       "device.allow_tf32: true needs device.kind CUDA"},
      {"negative lr", "", {"optimizer.lr=-1"}, "optimizer.lr: -1 must be > 0"},
      {"beta out of range", "", {"optimizer.beta2=1.5"}, "optimizer.beta2: 1.5 is not in [0, 1)"},
      {"dropout out of range", "", {"model.dropout=1"}, "model.dropout: 1 is not in [0, 1)"},
      {"val fraction", "", {"data.val_fraction=0.9"}, "data.val_fraction: 0.9 is not in [0, 0.5]"},
      {"unknown preset",
       "",
       {"model.preset=huge"},
       "model.preset: \"huge\" is not one of tiny, small, gpt2, llama-tiny"},
      {"bad name", "", {"name=has space"}, "name: \"has space\" must be 1-64 characters"},
      {"zero steps", "", {"train.steps=-3"}, "train.steps: -3 must be positive"},
      {"min_lr above lr",
       "",
       {"optimizer.min_lr=1"},
       "optimizer.min_lr: 1 is not in [0, lr = 0.0003]"},
      {"torchscript without path",
       "",
       {"model.architecture=TORCHSCRIPT"},
       "model.torchscript_path: must be set for architecture TORCHSCRIPT"},
      {"save without dir", "", {"checkpoint.save_final=true"}, "checkpoint.dir: must be set"},
      {"elastic above world",
       "",
       {"elastic.min_world_size=8"},
       "elastic.min_world_size: 8 is not in [0, world_size = 4]"},
      {"int32 overflow",
       "",
       {"train.steps=99999999999"},
       "train.steps: \"99999999999\" is out of range for int32"},
      {"not a bool",
       "",
       {"train.deterministic=maybe"},
       "train.deterministic: \"maybe\" is not a boolean"},
      {"odd llama head",
       "",
       {"model.preset=llama-tiny", "model.architecture=LLAMA", "model.n_head=64"},
       "model.n_embd: 64 / n_head 64 gives an odd head size"},
      {"hybrid without degree", "", {"fsdp.hybrid_shard_degree=0"}, "HYBRID_SHARD"},
      {"negative world", "", {"world_size=-2"}, "world_size: -2"},
      {"list for a number", "world_size: [1, 2]", {}, "world_size: a list is not an integer"},
      {"prompt longer than block",
       "",
       {"train.sample_prompt=" + std::string(80, 'x')},
       "train.sample_prompt: 80 bytes do not fit model.block_size 64"},
      // A zero the user wrote is refused, not replaced by the default.
      {"explicit zero world", "", {"world_size=0"}, "world_size: 0 must be positive"},
      {"explicit zero lr", "", {"optimizer.lr=0"}, "optimizer.lr: 0 must be > 0"},
      {"explicit zero steps", "", {"train.steps=0"}, "train.steps: 0 must be positive"},
      {"missing init weights",
       "",
       {"checkpoint.init_from_safetensors=/no/such/w.safetensors"},
       "checkpoint.init_from_safetensors: \"/no/such/w.safetensors\" does not exist"},
      {"missing checkpoint to continue",
       "",
       {"checkpoint.resume_from=/no/such/job-a/step_10"},
       "checkpoint.resume_from: \"/no/such/job-a/step_10\" does not exist"},
      {"not a checkpoint to continue",
       "",
       {"checkpoint.resume_from=data"},
       "data\" holds no committed checkpoint (no step_<N>/MANIFEST.json)"},
      {"init weights not safetensors",
       "",
       {"checkpoint.init_from_safetensors=data/tinyshakespeare.txt"},
       "tinyshakespeare.txt\" is not a safetensors file"},
      {"continue and init together",
       "",
       {"checkpoint.resume_from=/tmp", "checkpoint.init_from_safetensors=/tmp/w.safetensors"},
       "checkpoint.resume_from: set with checkpoint.init_from_safetensors (/tmp/w.safetensors); a "
       "job starts from one of them"},
      {"continue from scratch",
       "",
       {"checkpoint.resume_from=/tmp", "checkpoint.resume_step=0"},
       "checkpoint.resume_from: set with checkpoint.resume_step 0 (start from scratch)"},
      {"checkpoint dir under a file",
       "",
       {"checkpoint.dir=/proc/self/status/ckpt"},
       "checkpoint.dir: \"/proc/self/status/ckpt\" cannot be created: \"/proc/self/status\" is "
       "not a directory"},
      {"block class on a built-in model",
       "",
       {"fsdp.block_class=Block"},
       "fsdp.block_class: \"Block\" is only used with architecture TORCHSCRIPT (built-in models "
       "wrap their own blocks), not GPT"},
      {"block class not a name",
       "",
       {"model.preset=", "model.architecture=TORCHSCRIPT", "model.torchscript_path=/proc/version",
        "fsdp.block_class=my-model.Block"},
       "fsdp.block_class: \"my-model.Block\" is not a class name"},
      {"transformer block of a script without a block class",
       "",
       {"model.preset=", "model.architecture=TORCHSCRIPT", "model.torchscript_path=/proc/version",
        "fsdp.auto_wrap_policy=TRANSFORMER_BLOCK"},
       "fsdp.block_class: must name the TorchScript model's block class (e.g. \"Block\") for "
       "auto_wrap_policy TRANSFORMER_BLOCK"},
      {"replica groups on full shard",
       "",
       {"fsdp.sharding_strategy=FULL_SHARD", "fsdp.hybrid_shard_degree=0",
        "fault_tolerance.mode=REPLICA_GROUPS"},
       "fault_tolerance.mode REPLICA_GROUPS needs replica groups: fsdp.sharding_strategy "
       "FULL_SHARD shards every parameter over all W ranks, so a lost rank loses state no other "
       "rank holds; use HYBRID_SHARD"},
      {"replica groups on shard grad op",
       "",
       {"fsdp.sharding_strategy=SHARD_GRAD_OP", "fsdp.hybrid_shard_degree=0",
        "fault_tolerance.mode=REPLICA_GROUPS"},
       "fsdp.sharding_strategy SHARD_GRAD_OP shards the optimizer state"},
      {"one replica group",
       "",
       {"fsdp.hybrid_shard_degree=4", "fault_tolerance.mode=REPLICA_GROUPS"},
       "fault_tolerance.mode REPLICA_GROUPS needs at least 2 replica groups, but world_size 4 / "
       "shard degree 4 = 1"},
      {"min replicas above the groups",
       "",
       {"fault_tolerance.mode=REPLICA_GROUPS", "fault_tolerance.min_replicas=3"},
       "fault_tolerance.min_replicas: 3 is not in [1, 2]"},
      {"negative min replicas",
       "",
       {"fault_tolerance.mode=REPLICA_GROUPS", "fault_tolerance.min_replicas=-1"},
       "fault_tolerance.min_replicas: -1 is not in [1, 2]"},
      {"negative vote timeout",
       "",
       {"fault_tolerance.mode=REPLICA_GROUPS", "fault_tolerance.vote_timeout_s=-5"},
       "fault_tolerance.vote_timeout_s: -5 must be >= 0"},
      {"negative digest interval",
       "",
       {"fault_tolerance.digest_every_steps=-1"},
       "fault_tolerance.digest_every_steps: -1 must be >= 0"},
      {"replica groups with elastic",
       "",
       {"fault_tolerance.mode=REPLICA_GROUPS", "elastic.min_world_size=2"},
       "fault_tolerance.mode REPLICA_GROUPS cannot be combined with elastic.min_world_size 2 "
       "below world_size 4"},
      {"megabyte name is shown cut",
       "",
       {"name=" + std::string(1 << 20, 'n')},
       "... (1048576 bytes)\" must be 1-64 characters"},
  };
  ASSERT_GE(cases.size(), 20u);
  for (const BadSpec& c : cases) {
    auto spec = Load(c.text.empty() ? std::string(kBase) : c.text, c.sets);
    ASSERT_FALSE(spec.ok()) << c.label;
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument) << c.label;
    EXPECT_NE(spec.status().message().find(c.expected), absl::string_view::npos)
        << c.label << "\n  got:      " << spec.status().message() << "\n  expected: " << c.expected;
  }
}

// A TorchScript model's wrap policy defaults to TRANSFORMER_BLOCK when fsdp.block_class names its
// blocks, else to SIZE_BASED (no hook points); other policies take a block class too.
TEST(LoadJobSpec, TorchScriptWrapPolicyDefaultFollowsBlockClass) {
  const std::vector<std::string> script = {"model.preset=", "model.architecture=TORCHSCRIPT",
                                           "model.torchscript_path=/proc/version",
                                           "data.seq_len=32"};
  auto plain = Load(kBase, script);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->fsdp().auto_wrap_policy(), FsdpSpec::SIZE_BASED);
  EXPECT_EQ(plain->fsdp().min_num_params(), 1000000);
  std::vector<std::string> with_class = script;
  with_class.push_back("fsdp.block_class=mymodel.Block");
  auto blocks = Load(kBase, with_class);
  ASSERT_TRUE(blocks.ok()) << blocks.status();
  EXPECT_EQ(blocks->fsdp().auto_wrap_policy(), FsdpSpec::TRANSFORMER_BLOCK);
  EXPECT_EQ(blocks->fsdp().block_class(), "mymodel.Block");
  with_class.push_back("fsdp.auto_wrap_policy=PER_LAYER");
  auto per_layer = Load(kBase, with_class);
  ASSERT_TRUE(per_layer.ok()) << per_layer.status();
  EXPECT_EQ(per_layer->fsdp().auto_wrap_policy(), FsdpSpec::PER_LAYER);
  // Built-in models keep TRANSFORMER_BLOCK.
  EXPECT_EQ(Load(kBase)->fsdp().auto_wrap_policy(), FsdpSpec::TRANSFORMER_BLOCK);
}

TEST(LoadJobSpec, FaultToleranceParsesAndDefaults) {
  auto plain = Load(kBase);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->fault_tolerance().mode(), FaultToleranceSpec::NONE);
  EXPECT_EQ(plain->fault_tolerance().min_replicas(), 1);
  EXPECT_EQ(plain->fault_tolerance().vote_timeout_s(), 10);
  EXPECT_EQ(plain->fault_tolerance().digest_every_steps(), 0);

  auto ft = Load(std::string(kBase) + "fault_tolerance: {mode: REPLICA_GROUPS, min_replicas: 2}\n");
  ASSERT_TRUE(ft.ok()) << ft.status();
  EXPECT_EQ(ft->fault_tolerance().mode(), FaultToleranceSpec::REPLICA_GROUPS);
  EXPECT_EQ(ft->fault_tolerance().min_replicas(), 2);
  EXPECT_EQ(ft->fault_tolerance().vote_timeout_s(), 10);

  // ZERO2 and NO_SHARD (every rank a replica group) are accepted too.
  EXPECT_TRUE(
      Load(kBase, {"fsdp.sharding_strategy=HYBRID_SHARD_ZERO2",
                   "fault_tolerance.mode=REPLICA_GROUPS", "fault_tolerance.min_replicas=2",
                   "fault_tolerance.vote_timeout_s=3", "fault_tolerance.digest_every_steps=1"})
          .ok());
  auto no_shard =
      Load(kBase, {"fsdp.sharding_strategy=NO_SHARD", "fsdp.hybrid_shard_degree=0",
                   "fault_tolerance.mode=REPLICA_GROUPS", "fault_tolerance.min_replicas=4"});
  EXPECT_TRUE(no_shard.ok()) << no_shard.status();
}

// The coordinator refuses the same fault_tolerance specs (a spec sent as a proto, undefaulted).
TEST(ValidateForScheduling, RefusesReplicaGroupsWithoutReplicas) {
  JobSpec spec;
  spec.set_name("job");
  spec.set_world_size(4);
  spec.mutable_fault_tolerance()->set_mode(FaultToleranceSpec::REPLICA_GROUPS);
  absl::Status s = ValidateForScheduling(spec);  // strategy unspecified: FULL_SHARD
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("fsdp.sharding_strategy FULL_SHARD shards every parameter"),
            absl::string_view::npos)
      << s;
  spec.mutable_fsdp()->set_sharding_strategy(FsdpSpec::HYBRID_SHARD);
  spec.mutable_fsdp()->set_hybrid_shard_degree(2);
  EXPECT_TRUE(ValidateForScheduling(spec).ok());  // min_replicas 0 takes 1
  spec.mutable_fault_tolerance()->set_min_replicas(3);
  s = ValidateForScheduling(spec);
  EXPECT_NE(s.message().find("fault_tolerance.min_replicas: 3 is not in [1, 2]"),
            absl::string_view::npos)
      << s;
}

TEST(LoadJobSpec, ReportsEveryProblemAtOnce) {
  auto spec = Load(kBase, {"optimizer.lr=-1", "model.dropout=2"});
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.status().message().find("job spec has 2 errors:"), absl::string_view::npos)
      << spec.status().message();
}

// The coordinator's checks: only the fields it schedules by, with Validate's messages.
TEST(ValidateForScheduling, ChecksOnlyTheSchedulingFieldsWithValidatesMessages) {
  JobSpec spec;  // no model, data or train: only spec::Validate would object
  spec.set_name("job");
  spec.set_world_size(4);
  spec.mutable_fsdp()->set_sharding_strategy(FsdpSpec::FULL_SHARD);
  EXPECT_TRUE(ValidateForScheduling(spec).ok()) << ValidateForScheduling(spec);
  EXPECT_FALSE(Validate(spec, ValidateOptions{/*check_files=*/false}).ok());
  struct Case {
    std::string label;
    std::function<void(JobSpec*)> change;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"name", [](JobSpec* s) { s->set_name("bad name!"); },
       "name: \"bad name!\" must be 1-64 characters of [a-zA-Z0-9._-]"},
      {"world_size", [](JobSpec* s) { s->set_world_size(0); }, "world_size: 0 must be positive"},
      {"max_restarts", [](JobSpec* s) { s->mutable_restart()->set_max_restarts(-1); },
       "restart.max_restarts: -1 must be >= 0"},
      {"min_world_size", [](JobSpec* s) { s->mutable_elastic()->set_min_world_size(5); },
       "elastic.min_world_size: 5 is not in [0, world_size = 4]"},
      {"layout", [](JobSpec* s) { s->mutable_fsdp()->set_hybrid_shard_degree(3); },
       "fsdp.hybrid_shard_degree: 3 does not divide world_size 4"},
  };
  for (const Case& c : cases) {
    JobSpec bad = spec;
    c.change(&bad);
    const absl::Status s = ValidateForScheduling(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.label;
    EXPECT_EQ(s.message(), c.expected) << c.label;
    // Validate reports the same problem in the same words.
    EXPECT_NE(Validate(bad, ValidateOptions{false}).message().find(c.expected), std::string::npos)
        << c.label;
  }
  JobSpec two = spec;
  two.set_name("");
  two.mutable_restart()->set_max_restarts(-2);
  EXPECT_EQ(ValidateForScheduling(two).message(),
            "job spec has 2 errors:\n  name: \"\" must be 1-64 characters of [a-zA-Z0-9._-]\n  "
            "restart.max_restarts: -2 must be >= 0");
}

// Protobuf keeps fields it does not know (a newer client, a crafted request); the coordinator
// refuses them rather than store them and copy them into every START.
TEST(ValidateForScheduling, RefusesUnknownFieldsNamingWhereTheyAre) {
  JobSpec spec;
  spec.set_name("job");
  spec.set_world_size(1);
  spec.mutable_fsdp()->set_sharding_strategy(FsdpSpec::FULL_SHARD);
  JobSpec bad = spec;
  bad.GetReflection()->MutableUnknownFields(&bad)->AddVarint(999, 1);
  bad.mutable_fsdp()
      ->GetReflection()
      ->MutableUnknownFields(bad.mutable_fsdp())
      ->AddLengthDelimited(77, std::string(1 << 20, 'x'));
  const absl::Status s = ValidateForScheduling(bad);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "job spec has 2 errors:\n  #999: unknown field (not in this coordinator's JobSpec; is "
            "the client newer?)\n  fsdp.#77: unknown field (not in this coordinator's JobSpec; is "
            "the client newer?)");
  EXPECT_NE(Validate(bad, ValidateOptions{false}).message().find("fsdp.#77: unknown field"),
            std::string::npos);
  // Bytes with unknown field numbers, as a client would send them, parse into the same refusal.
  JobSpec parsed;
  ASSERT_TRUE(parsed.ParseFromString(bad.SerializeAsString()));
  EXPECT_EQ(ValidateForScheduling(parsed).message(), s.message());
  // A flood of them is one bounded message.
  JobSpec many = spec;
  for (int i = 0; i < 1000; ++i) {
    many.GetReflection()->MutableUnknownFields(&many)->AddVarint(1000 + i, i);
  }
  const std::string message(ValidateForScheduling(many).message());
  EXPECT_NE(message.find("... and 995 more unknown fields"), std::string::npos) << message;
  EXPECT_LT(message.size(), 1000u);
}

// The foundation's smoke test: a full spec survives YAML -> proto -> YAML -> proto, and JSON.
TEST(FoundationSmoke, JobSpecYamlAndJsonRoundTrip) {
  auto spec = LoadJobSpecFile("examples/tiny_gpt_shakespeare.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->fsdp().sharding_strategy(), FsdpSpec::HYBRID_SHARD);
  EXPECT_EQ(spec->fsdp().hybrid_shard_degree(), 2);
  EXPECT_EQ(spec->world_size(), 4);

  const std::string yaml = JobSpecToYaml(*spec);
  auto from_yaml = ParseJobSpec(yaml, "roundtrip.yaml");
  ASSERT_TRUE(from_yaml.ok()) << from_yaml.status() << "\n" << yaml;
  EXPECT_TRUE(MessageDifferencer::Equals(*spec, *from_yaml)) << yaml;

  const std::string json = JobSpecToJson(*spec);
  auto from_json = ParseJobSpec(json, "roundtrip.json");
  ASSERT_TRUE(from_json.ok()) << from_json.status() << "\n" << json;
  EXPECT_TRUE(MessageDifferencer::Equals(*spec, *from_json)) << json;
}

// The coordinator's settings (relative_to_cwd = false, no file checks): what it does with a spec
// sent as text by a remote client.
LoadOptions ServerOptions(const std::string& base_dir) {
  LoadOptions opts;
  opts.base_dir = base_dir;
  opts.relative_to_cwd = false;
  opts.validate.check_files = false;
  return opts;
}

TEST(LoadJobSpec, RelativePathWithoutBaseDirIsRefusedNamingTheFieldWhenNotRelativeToCwd) {
  auto spec = LoadJobSpecText(kBase, "submitted spec", ServerOptions(""));
  ASSERT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(spec.status().message(),
            "data.path: relative path \"data/tinyshakespeare.txt\" cannot be resolved without a "
            "base directory (give an absolute path, or the submitter's base_dir)");
}

TEST(LoadJobSpec, RelativePathsResolveAgainstAnAbsoluteBaseDirWhenNotRelativeToCwd) {
  auto spec = LoadJobSpecText(std::string(kBase) + "checkpoint: {dir: ../ckpt}\n", "submitted spec",
                              ServerOptions("/home/u/project"));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->data().path(), "/home/u/project/data/tinyshakespeare.txt");
  EXPECT_EQ(spec->checkpoint().dir(), "/home/u/ckpt");
  EXPECT_EQ(spec->model().n_embd(), 64);            // Preset resolved.
  EXPECT_DOUBLE_EQ(spec->optimizer().eps(), 1e-8);  // Default filled.
}

TEST(LoadJobSpec, RelativeBaseDirIsRefusedWhenNotRelativeToCwd) {
  auto spec = LoadJobSpecText(kBase, "submitted spec", ServerOptions("project"));
  ASSERT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(spec.status().message(), "base_dir: \"project\" is not an absolute path");
}

TEST(LoadJobSpec, AbsolutePathsNeedNoBaseDirWhenNotRelativeToCwd) {
  auto spec = LoadJobSpecText("model: {preset: tiny}\ndata: {path: /data/corpus.txt}\n",
                              "submitted spec", ServerOptions(""));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->data().path(), "/data/corpus.txt");
}

TEST(LoadJobSpec, MissingFileIsNotFound) {
  auto spec = LoadJobSpecFile("/no/such/spec.yaml");
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(spec.status().message(), "job spec \"/no/such/spec.yaml\" cannot be read");
}

TEST(ModelPresets, Gpt2SmallHas124MParameters) {
  ModelSpec m;
  m.set_preset("gpt2");
  ASSERT_TRUE(ResolvePreset(&m).ok());
  EXPECT_EQ(CountParameters(m), 124439808);  // Hugging Face's gpt2 count (tied head).
  ModelSpec llama;
  llama.set_preset("llama-tiny");
  ASSERT_TRUE(ResolvePreset(&llama).ok());
  EXPECT_EQ(llama.architecture(), ModelSpec::LLAMA);
  EXPECT_EQ(llama.ffn_hidden(), 192);
}

TEST(LoadJobSpec, HfDirFillsTheModelWhereFilesAreVisibleAndStaysUnresolvedAtTheCoordinator) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/hf_llama";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json") << R"({"model_type": "llama", "hidden_size": 64,
      "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 8,
      "num_key_value_heads": 2, "vocab_size": 300, "max_position_embeddings": 128,
      "rope_theta": 500000.0, "rms_norm_eps": 1e-6})";
  const std::string text =
      absl::StrCat("model: {hf_dir: ", dir, "}\ndata: {path: data/tinyshakespeare.txt}\n");
  auto spec = Load(text);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->model().architecture(), ModelSpec::LLAMA);
  EXPECT_EQ(spec->model().n_kv_head(), 2);
  EXPECT_EQ(spec->model().ffn_hidden(), 96);
  EXPECT_DOUBLE_EQ(spec->model().rope_theta(), 500000.0);
  EXPECT_EQ(spec->data().seq_len(), 128);  // = the config's max_position_embeddings.

  LoadOptions coordinator;
  coordinator.validate.check_files = false;
  auto unresolved = LoadJobSpecText(text, "job.yaml", coordinator);
  ASSERT_TRUE(unresolved.ok()) << unresolved.status();
  EXPECT_EQ(unresolved->model().architecture(), ModelSpec::ARCHITECTURE_UNSPECIFIED);
  EXPECT_EQ(unresolved->model().n_embd(), 0);
  EXPECT_EQ(unresolved->data().seq_len(), 0);
  EXPECT_TRUE(LoadJobSpecText(
                  absl::StrCat("model: {hf_dir: ", dir, "}\ndata: {path: x.txt, seq_len: 16}\n"),
                  "job.yaml", coordinator)
                  .ok());

  auto disagree = Load(text, {"model.n_layer=3"});
  EXPECT_EQ(disagree.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(disagree.status().message().find("model.n_layer: 3 does not match"), std::string::npos)
      << disagree.status();
  auto missing = Load("model: {hf_dir: /no/such/folder}\ndata: {path: data/tinyshakespeare.txt}\n");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("model.hf_dir: /no/such/folder/config.json"),
            std::string::npos)
      << missing.status();
}

TEST(LoadJobSpec, DataPathsValPathAndKvHeadsAreChecked) {
  auto both = Load("data: {path: data/tinyshakespeare.txt, paths: [data/tinyshakespeare.txt]}\n");
  EXPECT_NE(both.status().message().find("data.path: \""), std::string::npos) << both.status();
  EXPECT_NE(both.status().message().find("and data.paths are both set"), std::string::npos);
  auto val = Load(kBase, {"data.val_path=data/tinyshakespeare.txt", "data.val_fraction=0.2"});
  EXPECT_NE(val.status().message().find("data.val_fraction: 0.2 must be 0 when data.val_path"),
            std::string::npos)
      << val.status();
  auto defaulted = Load(kBase, {"data.val_path=data/tinyshakespeare.txt"});
  ASSERT_TRUE(defaulted.ok()) << defaulted.status();
  EXPECT_EQ(defaulted->data().val_fraction(), 0.0f);
  auto kv = Load(kBase, {"model.architecture=LLAMA", "model.n_kv_head=3"});
  EXPECT_NE(kv.status().message().find("model.n_kv_head: 3 does not divide model.n_head 4"),
            std::string::npos)
      << kv.status();
  auto gpt_kv = Load(kBase, {"model.n_kv_head=2"});
  EXPECT_NE(gpt_kv.status().message().find("model.n_kv_head: 2 is only used by LLAMA models"),
            std::string::npos)
      << gpt_kv.status();
}

}  // namespace
}  // namespace shardline::spec
