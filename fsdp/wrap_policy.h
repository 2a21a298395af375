// Wrap policy: which parameters form which FSDP unit (one FlatParam each), and at which RunUnit
// hook point each unit is gathered.
//
// Policies (FsdpSpec.WrapPolicy):
//   TRANSFORMER_BLOCK  every module whose type matches `block_type` (outermost match) is a unit
//                      holding its whole subtree's parameters;
//   PER_LAYER          every module that directly holds parameters is a unit;
//   PER_PARAMETER      every parameter is a unit;
//   SIZE_BASED         modules that directly hold parameters are taken in order (pre-order) and
//                      grouped until a group holds at least `min_num_params` parameters; a last
//                      group that stays below the minimum goes to the root.
// The root unit holds every parameter no other unit took, and always every shared (tied)
// parameter: a tensor reachable from two modules (a GPT's token embedding and output head) is
// deduplicated by its TensorImpl and kept once, in the root, so it has one gradient.
//
// Gather timing. LibTorch modules have no forward hooks; the model calls fsdp::RunUnit around
// the modules whose type matches `hook_type` (normally the transformer block type). Those calls
// are the only places the engine can gather and free. So a unit is gathered at the innermost
// hook module that contains all of its parameters; units finer than a hook point (PER_LAYER,
// PER_PARAMETER, small SIZE_BASED groups) are gathered together at that hook point, and units
// outside every hook module (or spanning several) are root-gathered: at the start of forward,
// kept until their gradients are reduced. Sharding (memory of shards, gradients and optimizer
// state) is per unit regardless; only the peak of gathered parameters depends on hook points.
//
// Thread safety: pure functions.
#ifndef SHARDLINE_FSDP_WRAP_POLICY_H_
#define SHARDLINE_FSDP_WRAP_POLICY_H_

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "fsdp/engine_options.h"  // WrapPolicy, WrapPolicyKind

namespace shardline::fsdp {

// Parses "TRANSFORMER_BLOCK", "PER_LAYER", "PER_PARAMETER", "SIZE_BASED".
// Errors: INVALID_ARGUMENT naming the value and the valid names.
absl::StatusOr<WrapPolicyKind> ParseWrapPolicy(absl::string_view name);
std::string WrapPolicyName(WrapPolicyKind kind);

// True when Module::name() `module_name` denotes the type `type` (see WrapPolicy::block_type).
bool ModuleTypeMatches(absl::string_view module_name, absl::string_view type);

struct UnitPlanParam {
  std::string name;
  std::vector<std::string> aliases;
  at::Tensor param;
};

struct UnitPlan {
  std::string name;       // "root" or the module path ("blocks.0"), or the parameter name.
  std::string hook_path;  // Path of the hook module it is gathered at; "" = root-gathered.
  std::vector<UnitPlanParam> params;
};

// Plans units for `root`'s parameters (those with requires_grad; frozen ones go to the root
// too). The root unit, if it has parameters, is first; the others follow module order.
// `hook_paths` (out, optional) receives the paths of all hook modules, in module order.
// Errors: INVALID_ARGUMENT for SIZE_BASED with min_num_params <= 0, or TRANSFORMER_BLOCK when
// no module matches block_type (the message names the type and the module types seen).
absl::StatusOr<std::vector<UnitPlan>> PlanUnits(const torch::nn::Module& root,
                                                const WrapPolicy& policy,
                                                std::vector<std::string>* hook_paths = nullptr);

}  // namespace shardline::fsdp

#endif  // SHARDLINE_FSDP_WRAP_POLICY_H_
