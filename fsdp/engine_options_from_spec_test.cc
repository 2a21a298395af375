#include "fsdp/engine_options_from_spec.h"

#include "gtest/gtest.h"
#include "proto/job_spec.pb.h"

namespace shardline::fsdp {
namespace {

// An empty FsdpSpec has no policy (spec/defaults.cc fills TRANSFORMER_BLOCK in a loaded spec).
FsdpSpec BlockSpec() {
  FsdpSpec f;
  f.set_auto_wrap_policy(FsdpSpec::TRANSFORMER_BLOCK);
  return f;
}

TEST(EngineOptionsFromSpec, UnsetFieldsGiveTheEngineDefaultsExceptLimitAllGathers) {
  absl::StatusOr<FsdpEngineOptions> o = EngineOptionsFromSpec(BlockSpec());
  ASSERT_TRUE(o.ok()) << o.status();
  const FsdpEngineOptions defaults;
  EXPECT_EQ(o->wrap_policy.kind, WrapPolicyKind::kTransformerBlock);
  EXPECT_EQ(o->wrap_policy.block_type, defaults.wrap_policy.block_type);  // The model's.
  EXPECT_EQ(o->rank, 0);
  EXPECT_FALSE(o->forward_prefetch);
  EXPECT_EQ(o->backward_prefetch, FsdpEngineOptions::BackwardPrefetch::kNone);
  // The proto's false; spec/defaults.cc writes true unless the spec says otherwise.
  EXPECT_FALSE(o->limit_all_gathers);
  EXPECT_FALSE(o->activation_checkpointing);
  EXPECT_FALSE(o->cpu_offload);
  EXPECT_EQ(o->param_dtype, Dtype::kFloat32);
  EXPECT_EQ(o->reduce_dtype, Dtype::kFloat32);
  EXPECT_EQ(o->buffer_dtype, Dtype::kFloat32);
  EXPECT_EQ(o->overlap_reduce, defaults.overlap_reduce);
  EXPECT_EQ(o->sync_module_states, defaults.sync_module_states);
}

TEST(EngineOptionsFromSpec, EverySpecFieldReachesItsOption) {
  FsdpSpec f;
  f.set_auto_wrap_policy(FsdpSpec::SIZE_BASED);
  f.set_min_num_params(1234);
  f.set_forward_prefetch(true);
  f.set_backward_prefetch(FsdpSpec::BACKWARD_POST);
  f.set_limit_all_gathers(true);
  f.set_activation_checkpointing(true);
  f.set_cpu_offload(true);
  f.mutable_mixed_precision()->set_param_dtype(FsdpSpec::BF16);
  f.mutable_mixed_precision()->set_reduce_dtype(FsdpSpec::FP16);
  f.mutable_mixed_precision()->set_buffer_dtype(FsdpSpec::FP32);
  absl::StatusOr<FsdpEngineOptions> o = EngineOptionsFromSpec(f);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->wrap_policy.kind, WrapPolicyKind::kSizeBased);
  EXPECT_EQ(o->wrap_policy.min_num_params, 1234);
  EXPECT_TRUE(o->forward_prefetch);
  EXPECT_EQ(o->backward_prefetch, FsdpEngineOptions::BackwardPrefetch::kPost);
  EXPECT_TRUE(o->limit_all_gathers);
  EXPECT_TRUE(o->activation_checkpointing);
  EXPECT_TRUE(o->cpu_offload);
  EXPECT_EQ(o->param_dtype, Dtype::kBFloat16);
  EXPECT_EQ(o->reduce_dtype, Dtype::kFloat16);
  EXPECT_EQ(o->buffer_dtype, Dtype::kFloat32);

  f.set_backward_prefetch(FsdpSpec::BACKWARD_PRE);
  f.set_auto_wrap_policy(FsdpSpec::PER_PARAMETER);
  o = EngineOptionsFromSpec(f);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->backward_prefetch, FsdpEngineOptions::BackwardPrefetch::kPre);
  EXPECT_EQ(o->wrap_policy.kind, WrapPolicyKind::kPerParameter);
  f.set_backward_prefetch(FsdpSpec::BACKWARD_NONE);
  f.set_auto_wrap_policy(FsdpSpec::PER_LAYER);
  o = EngineOptionsFromSpec(f);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->backward_prefetch, FsdpEngineOptions::BackwardPrefetch::kNone);
  EXPECT_EQ(o->wrap_policy.kind, WrapPolicyKind::kPerLayer);
}

TEST(EngineOptionsFromSpec, UnspecifiedWrapPolicyIsInvalidArgumentNamingTheField) {
  absl::StatusOr<FsdpEngineOptions> o = EngineOptionsFromSpec(FsdpSpec());
  ASSERT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(o.status().message(),
            "fsdp.auto_wrap_policy: unknown policy \"WRAP_POLICY_UNSPECIFIED\"; valid: "
            "TRANSFORMER_BLOCK, PER_LAYER, PER_PARAMETER, SIZE_BASED");
}

}  // namespace
}  // namespace shardline::fsdp
