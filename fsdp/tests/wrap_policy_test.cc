#include "fsdp/wrap_policy.h"

#include <set>

#include "absl/strings/match.h"
#include "fsdp/testing/tiny_gpt.h"
#include "gtest/gtest.h"

namespace shardline::fsdp {
namespace {

using testing::TinyGpt;
using testing::TinyGptConfig;

std::set<std::string> Names(const UnitPlan& u) {
  std::set<std::string> out;
  for (const auto& p : u.params) out.insert(p.name);
  return out;
}

TEST(PlanUnits, TransformerBlockMakesOneUnitPerBlockAndRootHoldsTheRest) {
  TinyGpt model{TinyGptConfig{}};
  std::vector<std::string> hooks;
  auto units = PlanUnits(*model, WrapPolicy{}, &hooks);
  ASSERT_TRUE(units.ok()) << units.status();
  ASSERT_EQ(units->size(), 3u);
  EXPECT_EQ((*units)[0].name, "root");
  EXPECT_EQ((*units)[0].hook_path, "");
  EXPECT_EQ(Names((*units)[0]),
            (std::set<std::string>{"wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias"}));
  EXPECT_EQ((*units)[1].name, "blocks.0");
  EXPECT_EQ((*units)[1].hook_path, "blocks.0");
  EXPECT_EQ((*units)[1].params.size(), 11u);
  EXPECT_EQ((*units)[2].hook_path, "blocks.1");
  EXPECT_EQ(hooks, (std::vector<std::string>{"blocks.0", "blocks.1"}));
}

TEST(PlanUnits, TiedWeightIsOneParameterInTheRootWithAnAlias) {
  TinyGpt model{TinyGptConfig{}};
  WrapPolicy policy;
  policy.kind = WrapPolicyKind::kPerLayer;
  auto units = PlanUnits(*model, policy);
  ASSERT_TRUE(units.ok()) << units.status();
  int seen = 0;
  for (const UnitPlan& u : *units) {
    for (const UnitPlanParam& p : u.params) {
      if (p.param.is_same(model->wte->weight)) {
        ++seen;
        EXPECT_EQ(u.name, "root");
        EXPECT_EQ(p.name, "wte.weight");
        EXPECT_EQ(p.aliases, std::vector<std::string>{"head.weight"});
      }
    }
  }
  EXPECT_EQ(seen, 1);
  // PER_LAYER: wpe, ln_f and each Linear/LayerNorm are units; the ones inside a block are
  // gathered at that block's hook.
  bool found_qkv = false;
  for (const UnitPlan& u : *units) {
    if (u.name == "blocks.1.qkv") {
      found_qkv = true;
      EXPECT_EQ(u.hook_path, "blocks.1");
    }
    if (u.name == "wpe") EXPECT_EQ(u.hook_path, "");
  }
  EXPECT_TRUE(found_qkv);
}

TEST(PlanUnits, PerParameterAndSizeBasedCoverEveryParameterOnce) {
  TinyGpt model{TinyGptConfig{}};
  for (WrapPolicyKind kind : {WrapPolicyKind::kPerParameter, WrapPolicyKind::kSizeBased}) {
    WrapPolicy policy;
    policy.kind = kind;
    policy.min_num_params = 3000;
    auto units = PlanUnits(*model, policy);
    ASSERT_TRUE(units.ok()) << units.status();
    std::set<const c10::TensorImpl*> seen;
    int64_t total = 0;
    for (const UnitPlan& u : *units) {
      for (const UnitPlanParam& p : u.params) {
        EXPECT_TRUE(seen.insert(p.param.unsafeGetTensorImpl()).second) << p.name;
        total += p.param.numel();
      }
      if (kind == WrapPolicyKind::kSizeBased && u.name != "root") {
        int64_t n = 0;
        for (const UnitPlanParam& p : u.params) n += p.param.numel();
        EXPECT_GE(n, 3000) << u.name;
      }
    }
    EXPECT_EQ(total, 16970);
    EXPECT_EQ(seen.size(), 26u);
  }
}

TEST(PlanUnits, BadPolicyInputsAreInvalidArgument) {
  TinyGpt model{TinyGptConfig{}};
  WrapPolicy policy;
  policy.block_type = "DecoderLayer";
  auto units = PlanUnits(*model, policy);
  ASSERT_FALSE(units.ok());
  EXPECT_EQ(units.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(units.status().message(), "DecoderLayer"));
  EXPECT_TRUE(absl::StrContains(units.status().message(), "Block"));  // Types seen.
  policy = WrapPolicy{};
  policy.kind = WrapPolicyKind::kSizeBased;
  policy.min_num_params = 0;
  units = PlanUnits(*model, policy);
  EXPECT_EQ(units.status().code(), absl::StatusCode::kInvalidArgument);
  auto parsed = ParseWrapPolicy("PER_BLOCK");
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(parsed.status().message(), "PER_BLOCK"));
  EXPECT_EQ(*ParseWrapPolicy("SIZE_BASED"), WrapPolicyKind::kSizeBased);
}

TEST(ModuleTypeMatches, IgnoresNamespaceAndImplSuffix) {
  EXPECT_TRUE(ModuleTypeMatches("shardline::models::BlockImpl", "Block"));
  EXPECT_TRUE(ModuleTypeMatches("Block", "BlockImpl"));
  EXPECT_FALSE(ModuleTypeMatches("BlockList", "Block"));
  EXPECT_FALSE(ModuleTypeMatches("Block", ""));
}

}  // namespace
}  // namespace shardline::fsdp
