// Sharded initialization (models/init.h, fsdp/param_init.h): a GPT or Llama built with
// InitMode::kDeferred holds no parameter memory, and wrapped by FsdpEngine with DeferredInit
// each rank builds only its shards, which equal the full (unsharded) initialisation bit for bit
// at W = 1, 2, 4 and S = 1, 2, 4; so does a TorchScript file's, read range by range, against
// torch::jit::load. Ranks are threads joined by in-process communicators.
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/grad_mode.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "fsdp/fsdp_engine.h"
#include "fsdp/layout.h"
#include "fsdp/param_init.h"
#include "fsdp/tests/inprocess_ranks.h"
#include "gtest/gtest.h"
#include "models/init.h"
#include "models/model_config.h"
#include "models/model_factory.h"

namespace shardline::fsdp::testing {
namespace {

using models::InitMode;
using models::ModelConfig;

// The initialisation as it was before sharded initialization (models/init.cc at 8d1004e),
// kept verbatim as the oracle: one CPU generator over named_parameters() in order, writing
// into a module whose parameters hold memory.
void UnshardedInitAsBefore(torch::nn::Module& module, uint64_t seed,
                           const models::InitRules& rules) {
  torch::NoGradGuard no_grad;
  at::Generator gen = at::detail::createCPUGenerator(seed);
  const double residual_std = 0.02 / std::sqrt(2.0 * rules.n_layer);
  for (auto& item : module.named_parameters(/*recurse=*/true)) {
    const std::string& name = item.key();
    at::Tensor& p = item.value();
    bool is_norm = false;
    for (const std::string& f : rules.norm_fragments) is_norm |= absl::StrContains(name, f);
    if (absl::EndsWith(name, ".bias")) {
      p.zero_();
    } else if (is_norm) {
      p.fill_(1.0);
    } else {
      bool residual = false;
      for (const std::string& s : rules.residual_suffixes) residual |= absl::EndsWith(name, s);
      at::Tensor values = at::empty(p.sizes(), at::TensorOptions().dtype(at::kFloat));
      values.normal_(0.0, residual ? residual_std : 0.02, gen);
      p.copy_(values);
    }
  }
}

ModelConfig Config(const std::string& preset) {
  absl::StatusOr<ModelConfig> c = models::PresetModelConfig(preset, /*init_seed=*/1234);
  EXPECT_TRUE(c.ok()) << c.status();
  return *c;
}

models::InitRules RulesOf(const ModelConfig& c) {
  if (c.architecture == models::Architecture::kLlama) {
    return {static_cast<int>(c.n_layer), {"wo.weight", "w2.weight"}, {"norm."}};
  }
  return {static_cast<int>(c.n_layer), {"c_proj.weight"}, {"ln_"}};
}

// The full initial weights as the unsharded initialisation before this change made them.
std::map<std::string, at::Tensor> ReferenceWeights(const ModelConfig& config) {
  auto model = models::CreateModel(config, InitMode::kMaterialized);
  EXPECT_TRUE(model.ok()) << model.status();
  UnshardedInitAsBefore((*model)->module(), config.init_seed, RulesOf(config));
  std::map<std::string, at::Tensor> out;
  for (const auto& item : (*model)->module().named_parameters(/*recurse=*/true)) {
    out[item.key()] = item.value().detach().clone();
  }
  return out;
}

TEST(SeededInit, MaterializedModelEqualsTheUnshardedInitialisationBitForBit) {
  for (const std::string preset : {"tiny", "llama-tiny"}) {
    const ModelConfig config = Config(preset);
    const std::map<std::string, at::Tensor> want = ReferenceWeights(config);
    auto model = models::CreateModel(config, InitMode::kMaterialized);
    ASSERT_TRUE(model.ok()) << model.status();
    EXPECT_EQ((*model)->deferred_init(), nullptr);
    size_t n = 0;
    for (const auto& item : (*model)->module().named_parameters(/*recurse=*/true)) {
      ASSERT_TRUE(want.count(item.key())) << item.key();
      EXPECT_TRUE(at::equal(item.value(), want.at(item.key()))) << preset << " " << item.key();
      ++n;
    }
    EXPECT_EQ(n, want.size());
  }
}

TEST(SeededInit, DeferredModelHoldsNoParameterMemory) {
  for (const std::string preset : {"tiny", "llama-tiny"}) {
    auto model = models::CreateModel(Config(preset), InitMode::kDeferred);
    ASSERT_TRUE(model.ok()) << model.status();
    EXPECT_NE((*model)->deferred_init(), nullptr);
    for (const auto& item : (*model)->module().named_parameters(/*recurse=*/true)) {
      EXPECT_TRUE(IsStorageless(item.value())) << preset << " " << item.key();
      EXPECT_EQ(item.value().storage().nbytes(), 0u) << item.key();
      EXPECT_TRUE(item.value().requires_grad()) << item.key();
    }
    EXPECT_GT((*model)->NumParameters(), 0);
  }
}

// Appends to `mismatches` every way this rank's engine differs from the full weights `want`:
// its own shards (no gather: the matching ranges of the reference), the gathered weights.
absl::Status CompareWith(FsdpEngine& engine, const std::map<std::string, at::Tensor>& want,
                         std::vector<std::string>* mismatches) {
  for (const ShardSlice& s : engine.LocalParamState()) {
    const at::Tensor full = want.at(s.name).reshape({-1});
    if (!at::equal(s.local, full.narrow(0, s.start, s.end - s.start))) {
      mismatches->push_back(absl::StrCat("shard of ", s.name));
    }
  }
  ASSIGN_OR_RETURN(auto gathered, engine.FullParamState(/*rank0_only=*/false));
  if (gathered.size() + engine.aliases().size() != want.size()) {
    mismatches->push_back(absl::StrCat(gathered.size(), " gathered tensors"));
  }
  for (const auto& [name, t] : gathered) {
    if (!at::equal(t.cpu(), want.at(name))) mismatches->push_back(name);
  }
  return absl::OkStatus();
}

struct Case {
  std::string preset;
  int world_size, shard_degree;
  WrapPolicyKind wrap = WrapPolicyKind::kTransformerBlock;
  Dtype param_dtype = Dtype::kFloat32;
  bool cpu_offload = false;
};

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  std::string name = absl::StrCat(c.preset, "_W", c.world_size, "_S", c.shard_degree,
                                  c.wrap == WrapPolicyKind::kSizeBased ? "_size_based" : "",
                                  c.param_dtype == Dtype::kBFloat16 ? "_bf16" : "",
                                  c.cpu_offload ? "_offload" : "");
  for (char& ch : name) {
    if (ch == '-') ch = '_';
  }
  return name;
}

ParallelLayout LayoutOf(const Case& c) {
  absl::StatusOr<ParallelLayout> layout =
      c.shard_degree == 1 ? ParallelLayout::Create(c.world_size, "NO_SHARD", 0)
      : c.shard_degree == c.world_size
          ? ParallelLayout::Create(c.world_size, "FULL_SHARD", 0)
          : ParallelLayout::Create(c.world_size, "HYBRID_SHARD", c.shard_degree);
  EXPECT_TRUE(layout.ok()) << layout.status();
  return *layout;
}

class ShardedInit : public ::testing::TestWithParam<Case> {};

TEST_P(ShardedInit, ShardsAndGatheredWeightsEqualTheFullInitialisationBitForBit) {
  const Case& c = GetParam();
  const ModelConfig config = Config(c.preset);
  const std::map<std::string, at::Tensor> want = ReferenceWeights(config);
  const ParallelLayout layout = LayoutOf(c);
  FakeWorld world(c.world_size, c.shard_degree);
  std::vector<std::vector<std::string>> mismatches(c.world_size);
  std::vector<int64_t> shard_bytes(c.world_size);
  std::vector<absl::Status> statuses =
      RunOnThreads(world, [&](int rank, Communicator* shard, Communicator* replicate) {
        ASSIGN_OR_RETURN(auto model, models::CreateModel(config, InitMode::kDeferred));
        FsdpEngineOptions options;
        options.rank = rank;
        options.wrap_policy.kind = c.wrap;
        options.wrap_policy.min_num_params = 2000;
        options.param_dtype = c.param_dtype;
        options.cpu_offload = c.cpu_offload;
        const DeferredInit deferred{model->deferred_init(), at::kCPU};
        ASSIGN_OR_RETURN(auto engine, FsdpEngine::Create(model->module_ptr(), layout, shard,
                                                         replicate, options, &deferred));
        shard_bytes[rank] = engine->memory_stats().param_shard_bytes;
        return CompareWith(*engine, want, &mismatches[rank]);
      });
  int64_t total = 0;
  for (const auto& [name, t] : want) total += t.numel() * 4;
  for (int r = 0; r < c.world_size; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r];
    EXPECT_TRUE(mismatches[r].empty()) << "rank " << r << ": " << mismatches[r].front();
    // About 1/S of the model (padding adds less than S elements per unit).
    EXPECT_LE(shard_bytes[r], total / c.shard_degree + 4 * 64 * c.shard_degree) << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(
    WorldAndShardDegrees, ShardedInit,
    ::testing::Values(Case{"tiny", 1, 1}, Case{"tiny", 2, 1}, Case{"tiny", 2, 2},
                      Case{"tiny", 4, 1}, Case{"tiny", 4, 2}, Case{"tiny", 4, 4},
                      Case{"llama-tiny", 1, 1}, Case{"llama-tiny", 2, 2}, Case{"llama-tiny", 4, 2},
                      Case{"llama-tiny", 4, 4}, Case{"tiny", 4, 4, WrapPolicyKind::kSizeBased},
                      Case{"tiny", 4, 2, WrapPolicyKind::kTransformerBlock, Dtype::kBFloat16, true},
                      Case{"llama-tiny", 1, 1, WrapPolicyKind::kTransformerBlock,
                           Dtype::kBFloat16}),
    CaseName);

// A TorchScript file (models/torchscript_file.h): each rank reads only its ranges from the file,
// and its shards and the gathered weights equal torch::jit::load's whole values bit for bit.
struct ScriptCase {
  std::string file, block_class;
  int world_size, shard_degree;
};

class ScriptedShardedInit : public ::testing::TestWithParam<ScriptCase> {};

TEST_P(ScriptedShardedInit, ShardsEqualTheWholeLoadBitForBit) {
  const ScriptCase& c = GetParam();
  ModelConfig config;
  config.architecture = models::Architecture::kTorchScript;
  config.torchscript_path = "models/testdata/" + c.file;
  config.vocab_size = 256;
  config.block_class = c.block_class;
  std::map<std::string, at::Tensor> want;
  {
    auto whole = models::CreateModel(config, InitMode::kMaterialized);
    ASSERT_TRUE(whole.ok()) << whole.status();
    for (const auto& item : (*whole)->module().named_parameters(/*recurse=*/true)) {
      want[item.key()] = item.value().detach().clone();
    }
  }
  const ParallelLayout layout = LayoutOf(Case{c.file, c.world_size, c.shard_degree});
  FakeWorld world(c.world_size, c.shard_degree);
  std::vector<std::vector<std::string>> mismatches(c.world_size);
  std::vector<absl::Status> statuses =
      RunOnThreads(world, [&](int rank, Communicator* shard, Communicator* replicate) {
        ASSIGN_OR_RETURN(auto model, models::CreateModel(config, InitMode::kDeferred));
        if (model->deferred_init() == nullptr) {
          return absl::InternalError(absl::StrCat("loaded whole: ", model->Describe()));
        }
        FsdpEngineOptions options;
        options.rank = rank;
        options.wrap_policy.kind =
            c.block_class.empty() ? WrapPolicyKind::kSizeBased : WrapPolicyKind::kTransformerBlock;
        options.wrap_policy.block_type = model->block_type();
        options.wrap_policy.min_num_params = 2000;
        const DeferredInit deferred{model->deferred_init(), at::kCPU};
        ASSIGN_OR_RETURN(auto engine, FsdpEngine::Create(model->module_ptr(), layout, shard,
                                                         replicate, options, &deferred));
        return CompareWith(*engine, want, &mismatches[rank]);
      });
  for (int r = 0; r < c.world_size; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r];
    EXPECT_TRUE(mismatches[r].empty()) << "rank " << r << ": " << mismatches[r].front();
  }
}

INSTANTIATE_TEST_SUITE_P(Files, ScriptedShardedInit,
                         ::testing::Values(ScriptCase{"blocks_lm.pt", "Block", 1, 1},
                                           ScriptCase{"blocks_lm.pt", "Block", 4, 4},
                                           ScriptCase{"blocks_lm.pt", "Block", 4, 2},
                                           ScriptCase{"blocks_lm.pt", "", 2, 2},
                                           ScriptCase{"layout_lm.pt", "", 4, 4},
                                           ScriptCase{"layout_lm.pt", "", 2, 1}),
                         [](const ::testing::TestParamInfo<ScriptCase>& info) {
                           const ScriptCase& c = info.param;
                           std::string name =
                               absl::StrCat(c.file.substr(0, c.file.find('.')),
                                            c.block_class.empty() ? "" : "_blocks", "_W",
                                            c.world_size, "_S", c.shard_degree);
                           return name;
                         });

TEST(ShardedInit, RefusesParametersThatHoldMemory) {
  auto model = models::CreateModel(Config("tiny"), InitMode::kMaterialized);
  ASSERT_TRUE(model.ok()) << model.status();
  auto deferred_model = models::CreateModel(Config("tiny"), InitMode::kDeferred);
  ASSERT_TRUE(deferred_model.ok()) << deferred_model.status();
  const DeferredInit deferred{(*deferred_model)->deferred_init(), at::kCPU};
  auto engine = FsdpEngine::Create((*model)->module_ptr(), ParallelLayout(), nullptr, nullptr,
                                   FsdpEngineOptions(), &deferred);
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(engine.status().message(), "holds memory")) << engine.status();
}

// An initializer that produces `names`, each with the given shape.
class FakeInit : public ParamInitializer {
 public:
  explicit FakeInit(std::vector<std::pair<std::string, std::vector<int64_t>>> values)
      : values_(std::move(values)) {}
  absl::Status ForEach(const Visitor& visit) const override {
    for (const auto& [name, shape] : values_) {
      RETURN_IF_ERROR(visit(name, InitialValue::Fill(shape, 0.5)));
    }
    return absl::OkStatus();
  }

 private:
  std::vector<std::pair<std::string, std::vector<int64_t>>> values_;
};

absl::Status EngineWith(const ParamInitializer& init) {
  auto model = models::CreateModel(Config("tiny"), InitMode::kDeferred);
  if (!model.ok()) return model.status();
  const DeferredInit deferred{&init, at::kCPU};
  return FsdpEngine::Create((*model)->module_ptr(), ParallelLayout(), nullptr, nullptr,
                            FsdpEngineOptions(), &deferred)
      .status();
}

TEST(ShardedInit, InitializerNamesAndShapesMustMatchTheModel) {
  // The real initializer's list, then one wrong name, one wrong shape, one missing parameter.
  auto model = models::CreateModel(Config("tiny"), InitMode::kDeferred);
  ASSERT_TRUE(model.ok()) << model.status();
  std::vector<std::pair<std::string, std::vector<int64_t>>> params;
  for (const auto& item : (*model)->module().named_parameters(/*recurse=*/true)) {
    params.emplace_back(item.key(), item.value().sizes().vec());
  }
  EXPECT_TRUE(EngineWith(FakeInit(params)).ok());

  auto unknown = params;
  unknown[0].first = "no.such.weight";
  absl::Status s = EngineWith(FakeInit(unknown));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "the model has no parameter no.such.weight")) << s;

  auto reshaped = params;
  reshaped[0].second = {1, 2, 3};
  s = EngineWith(FakeInit(reshaped));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(
      absl::StrContains(s.message(), absl::StrCat("parameter ", params[0].first, " has shape")))
      << s;

  auto missing = params;
  missing.pop_back();
  s = EngineWith(FakeInit(missing));
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(absl::StrContains(
      s.message(), absl::StrCat("no initial value for parameter ", params.back().first)))
      << s;
}

}  // namespace
}  // namespace shardline::fsdp::testing

int main(int argc, char** argv) {
  at::set_num_threads(1);  // The ranks are threads already.
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
