// FsdpEngineOptions: every option of the FSDP engine (fsdp/fsdp_engine.h) as plain values, with
// no LibTorch and no protobuf, so the trainer's config carries it from the job spec to the
// engine untouched. EngineOptionsFromSpec (fsdp/engine_options_from_spec.h) fills it from the
// spec's fsdp.* fields; what each option does and how they interact is in docs/fsdp_step.md.
//
// Adding an option: the proto field (proto/job_spec.proto), its validation (spec/validate.cc),
// a field here, its conversion in engine_options_from_spec.cc, the engine's use and its test.
//
// Thread safety: plain values.
#ifndef SHARDLINE_FSDP_ENGINE_OPTIONS_H_
#define SHARDLINE_FSDP_ENGINE_OPTIONS_H_

#include <cstdint>
#include <string>

namespace shardline::fsdp {

// What becomes one FSDP unit (FsdpSpec.WrapPolicy; the policies are described in wrap_policy.h).
enum class WrapPolicyKind { kTransformerBlock, kPerLayer, kPerParameter, kSizeBased };

struct WrapPolicy {
  WrapPolicyKind kind = WrapPolicyKind::kTransformerBlock;
  // Module type of a transformer block, matched against Module::name() ignoring a namespace
  // prefix and an "Impl" suffix ("Block" matches "shardline::models::BlockImpl"). A fact of the
  // model, not of the spec: the caller sets it.
  std::string block_type = "Block";
  // Type of the modules the model calls RunUnit around; empty = block_type.
  std::string hook_type;
  int64_t min_num_params = 0;  // SIZE_BASED only; must be > 0 there.
};

// Floating dtypes of mixed precision (FsdpSpec.Dtype): float32, bfloat16, float16.
enum class Dtype { kFloat32, kBFloat16, kFloat16 };

struct FsdpEngineOptions {
  // Global rank in [0, W). A fact of the process, not of the spec: the caller sets it.
  int rank = 0;
  WrapPolicy wrap_policy;
  // Broadcast parameters and buffers from rank 0 at wrap time (PyTorch's sync_module_states).
  bool sync_module_states = true;
  // Prefetch (timing only, never numerics): forward_prefetch gathers hook group i+1 while i
  // computes; backward kPre gathers the previous group before a group's backward computes, kPost
  // after its gradients are reduced, kNone on demand.
  bool forward_prefetch = false;
  enum class BackwardPrefetch { kNone, kPre, kPost };
  BackwardPrefetch backward_prefetch = BackwardPrefetch::kNone;
  // At most two hook groups gathered at once; a prefetch that would make a third is skipped.
  bool limit_all_gathers = true;
  // Recompute each hook group's forward in backward instead of keeping its activations.
  bool activation_checkpointing = false;
  // Reduce a unit's gradient asynchronously while backward goes on with the next unit.
  bool overlap_reduce = true;
  // Mixed precision: compute (gathered parameters, gradients), reduction and buffer dtypes; the
  // fp32 master shards and optimizer state never change dtype.
  Dtype param_dtype = Dtype::kFloat32;
  Dtype reduce_dtype = Dtype::kFloat32;
  Dtype buffer_dtype = Dtype::kFloat32;
  // Persistent state (shards, gradient shards, optimizer state) in host memory (CUDA models).
  bool cpu_offload = false;
};

}  // namespace shardline::fsdp

#endif  // SHARDLINE_FSDP_ENGINE_OPTIONS_H_
