#include "fsdp/engine_options_from_spec.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "fsdp/layout.h"
#include "proto/job_spec.pb.h"

namespace shardline::fsdp {
namespace {

// ParallelLayout::Create takes the spec's strategy enum by number (fsdp/layout.h).
static_assert(static_cast<int>(ShardingStrategy::kUnspecified) ==
              FsdpSpec::SHARDING_STRATEGY_UNSPECIFIED);
static_assert(static_cast<int>(ShardingStrategy::kFullShard) == FsdpSpec::FULL_SHARD);
static_assert(static_cast<int>(ShardingStrategy::kShardGradOp) == FsdpSpec::SHARD_GRAD_OP);
static_assert(static_cast<int>(ShardingStrategy::kNoShard) == FsdpSpec::NO_SHARD);
static_assert(static_cast<int>(ShardingStrategy::kHybridShard) == FsdpSpec::HYBRID_SHARD);
static_assert(static_cast<int>(ShardingStrategy::kHybridShardZero2) ==
              FsdpSpec::HYBRID_SHARD_ZERO2);

Dtype DtypeFromSpec(FsdpSpec::Dtype d) {
  switch (d) {
    case FsdpSpec::BF16:
      return Dtype::kBFloat16;
    case FsdpSpec::FP16:
      return Dtype::kFloat16;
    default:
      return Dtype::kFloat32;
  }
}

}  // namespace

absl::StatusOr<FsdpEngineOptions> EngineOptionsFromSpec(const FsdpSpec& f) {
  FsdpEngineOptions o;
  switch (f.auto_wrap_policy()) {
    case FsdpSpec::TRANSFORMER_BLOCK:
      o.wrap_policy.kind = WrapPolicyKind::kTransformerBlock;
      break;
    case FsdpSpec::PER_LAYER:
      o.wrap_policy.kind = WrapPolicyKind::kPerLayer;
      break;
    case FsdpSpec::PER_PARAMETER:
      o.wrap_policy.kind = WrapPolicyKind::kPerParameter;
      break;
    case FsdpSpec::SIZE_BASED:
      o.wrap_policy.kind = WrapPolicyKind::kSizeBased;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("fsdp.auto_wrap_policy: unknown policy \"",
                       FsdpSpec::WrapPolicy_Name(f.auto_wrap_policy()),
                       "\"; valid: TRANSFORMER_BLOCK, PER_LAYER, PER_PARAMETER, SIZE_BASED"));
  }
  o.wrap_policy.min_num_params = f.min_num_params();
  o.forward_prefetch = f.forward_prefetch();
  using Prefetch = FsdpEngineOptions::BackwardPrefetch;
  o.backward_prefetch = f.backward_prefetch() == FsdpSpec::BACKWARD_PRE    ? Prefetch::kPre
                        : f.backward_prefetch() == FsdpSpec::BACKWARD_POST ? Prefetch::kPost
                                                                           : Prefetch::kNone;
  o.limit_all_gathers = f.limit_all_gathers();
  o.activation_checkpointing = f.activation_checkpointing();
  o.param_dtype = DtypeFromSpec(f.mixed_precision().param_dtype());
  o.reduce_dtype = DtypeFromSpec(f.mixed_precision().reduce_dtype());
  o.buffer_dtype = DtypeFromSpec(f.mixed_precision().buffer_dtype());
  o.cpu_offload = f.cpu_offload();
  return o;
}

}  // namespace shardline::fsdp
