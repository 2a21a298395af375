#include "fsdp/wrap_policy.h"

#include <map>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace shardline::fsdp {
namespace {

absl::string_view BareType(absl::string_view name) {
  const size_t colon = name.rfind("::");
  if (colon != absl::string_view::npos) name.remove_prefix(colon + 2);
  if (absl::EndsWith(name, "Impl") && name.size() > 4) name.remove_suffix(4);
  return name;
}

bool IsUnder(const std::string& path, const std::string& ancestor) {
  if (ancestor.empty()) return true;
  return path == ancestor || absl::StartsWith(path, absl::StrCat(ancestor, "."));
}

struct ParamInfo {
  std::string name;
  std::vector<std::string> aliases;
  at::Tensor param;
  std::set<std::string> owners;  // Module paths holding it directly.
};

// The module tree flattened: modules in pre-order (the root first, as path ""), parameters
// deduplicated by TensorImpl in first-seen order, and which parameters each module holds directly.
struct ModuleIndex {
  std::vector<std::pair<std::string, const torch::nn::Module*>> modules;
  std::vector<ParamInfo> params;
  std::vector<std::vector<size_t>> direct;  // module -> param indices it saw first

  // Held by several modules or under several names (tied weights): such a parameter can only
  // live in the root unit.
  bool IsShared(size_t p) const {
    return params[p].owners.size() > 1 || !params[p].aliases.empty();
  }
};

ModuleIndex IndexModules(const torch::nn::Module& root) {
  ModuleIndex x;
  x.modules.emplace_back("", &root);
  for (const auto& item : root.named_modules(/*name_prefix=*/"", /*include_self=*/false)) {
    x.modules.emplace_back(item.key(), item.value().get());
  }
  std::map<const c10::TensorImpl*, size_t> index_of;
  x.direct.resize(x.modules.size());
  for (size_t m = 0; m < x.modules.size(); ++m) {
    const std::string& path = x.modules[m].first;
    for (const auto& item : x.modules[m].second->named_parameters(/*recurse=*/false)) {
      const std::string full = path.empty() ? item.key() : absl::StrCat(path, ".", item.key());
      const c10::TensorImpl* impl = item.value().unsafeGetTensorImpl();
      auto it = index_of.find(impl);
      if (it == index_of.end()) {
        index_of[impl] = x.params.size();
        x.params.push_back(ParamInfo{full, {}, item.value(), {path}});
        x.direct[m].push_back(x.params.size() - 1);
      } else {
        x.params[it->second].aliases.push_back(full);
        x.params[it->second].owners.insert(path);
      }
    }
  }
  return x;
}

// Builds the units of one policy from a ModuleIndex: each Add takes its parameters (once).
class UnitBuilder {
 public:
  explicit UnitBuilder(const ModuleIndex& x) : x_(x), taken_(x.params.size(), false) {}

  void Add(std::string name, const std::vector<size_t>& members) {
    UnitPlan u;
    u.name = std::move(name);
    for (size_t p : members) {
      taken_[p] = true;
      u.params.push_back(
          UnitPlanParam{x_.params[p].name, x_.params[p].aliases, x_.params[p].param});
    }
    if (!u.params.empty()) units_.push_back(std::move(u));
  }

  // The untaken, unshared parameters held anywhere under module path `prefix`.
  std::vector<size_t> SubtreeParams(const std::string& prefix) const {
    std::vector<size_t> out;
    for (size_t m = 0; m < x_.modules.size(); ++m) {
      if (!IsUnder(x_.modules[m].first, prefix)) continue;
      for (size_t p : x_.direct[m]) {
        if (!taken_[p] && !x_.IsShared(p)) out.push_back(p);
      }
    }
    return out;
  }

  // The root unit: everything not taken, shared parameters included.
  UnitPlan Root() const {
    UnitPlan root;
    root.name = "root";
    for (size_t p = 0; p < x_.params.size(); ++p) {
      if (taken_[p]) continue;
      root.params.push_back(
          UnitPlanParam{x_.params[p].name, x_.params[p].aliases, x_.params[p].param});
    }
    return root;
  }

  std::vector<UnitPlan>& units() { return units_; }

 private:
  const ModuleIndex& x_;
  std::vector<bool> taken_;
  std::vector<UnitPlan> units_;
};

// One unit per outermost module of policy.block_type. Errors: INVALID_ARGUMENT when there is none,
// listing the module types seen.
absl::Status AddBlockUnits(const ModuleIndex& x, const WrapPolicy& policy, UnitBuilder& b) {
  std::vector<std::string> blocks;
  std::set<std::string> types_seen;
  for (const auto& [path, module] : x.modules) {
    types_seen.insert(std::string(BareType(module->name())));
    if (path.empty() || !ModuleTypeMatches(module->name(), policy.block_type)) continue;
    bool nested = false;
    for (const std::string& block : blocks) nested = nested || IsUnder(path, block);
    if (!nested) blocks.push_back(path);
  }
  if (blocks.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("fsdp.auto_wrap_policy: TRANSFORMER_BLOCK found no module of type \"",
                     policy.block_type, "\"; module types: ", absl::StrJoin(types_seen, ", ")));
  }
  for (const std::string& block : blocks) b.Add(block, b.SubtreeParams(block));
  return absl::OkStatus();
}

// One unit per module with parameters of its own.
void AddLayerUnits(const ModuleIndex& x, UnitBuilder& b) {
  for (size_t m = 1; m < x.modules.size(); ++m) {
    std::vector<size_t> mine;
    for (size_t p : x.direct[m]) {
      if (!x.IsShared(p)) mine.push_back(p);
    }
    b.Add(x.modules[m].first, mine);
  }
}

// One unit per parameter.
void AddParameterUnits(const ModuleIndex& x, UnitBuilder& b) {
  for (size_t p = 0; p < x.params.size(); ++p) {
    if (!x.IsShared(p)) b.Add(x.params[p].name, {p});
  }
}

// Consecutive modules grouped until a group holds at least min_num_params parameters; a short
// last group stays untaken (the root gets it).
void AddSizeBasedUnits(const ModuleIndex& x, const WrapPolicy& policy, UnitBuilder& b) {
  std::vector<size_t> group;
  int64_t count = 0;
  std::string first_path;
  for (size_t m = 1; m < x.modules.size(); ++m) {
    for (size_t p : x.direct[m]) {
      if (x.IsShared(p)) continue;
      if (group.empty()) first_path = x.modules[m].first;
      group.push_back(p);
      count += x.params[p].param.numel();
    }
    if (!group.empty() && count >= policy.min_num_params) {
      b.Add(first_path, group);
      group.clear();
      count = 0;
    }
  }
}

// Each unit's gather point: the innermost hook module containing every owner of every parameter
// of the unit ("" when none does: the root's forward gathers it).
void AssignHookPaths(const ModuleIndex& x, const std::vector<std::string>& hook_paths,
                     std::vector<UnitPlan>& units) {
  std::map<const c10::TensorImpl*, const std::set<std::string>*> owners_of;
  for (const ParamInfo& p : x.params) owners_of[p.param.unsafeGetTensorImpl()] = &p.owners;
  for (UnitPlan& u : units) {
    std::string best;
    for (const std::string& h : hook_paths) {
      bool all = true;
      for (const UnitPlanParam& p : u.params) {
        for (const std::string& owner : *owners_of[p.param.unsafeGetTensorImpl()]) {
          all = all && IsUnder(owner, h);
        }
      }
      if (all && h.size() > best.size()) best = h;
    }
    u.hook_path = best;
  }
}

}  // namespace

absl::StatusOr<WrapPolicyKind> ParseWrapPolicy(absl::string_view name) {
  for (WrapPolicyKind k : {WrapPolicyKind::kTransformerBlock, WrapPolicyKind::kPerLayer,
                           WrapPolicyKind::kPerParameter, WrapPolicyKind::kSizeBased}) {
    if (name == WrapPolicyName(k)) return k;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("fsdp.auto_wrap_policy: unknown policy \"", name,
                   "\"; valid: TRANSFORMER_BLOCK, PER_LAYER, PER_PARAMETER, SIZE_BASED"));
}

std::string WrapPolicyName(WrapPolicyKind kind) {
  switch (kind) {
    case WrapPolicyKind::kTransformerBlock:
      return "TRANSFORMER_BLOCK";
    case WrapPolicyKind::kPerLayer:
      return "PER_LAYER";
    case WrapPolicyKind::kPerParameter:
      return "PER_PARAMETER";
    case WrapPolicyKind::kSizeBased:
      return "SIZE_BASED";
  }
  return "UNKNOWN";
}

bool ModuleTypeMatches(absl::string_view module_name, absl::string_view type) {
  return !type.empty() && BareType(module_name) == BareType(type);
}

absl::StatusOr<std::vector<UnitPlan>> PlanUnits(const torch::nn::Module& root,
                                                const WrapPolicy& policy,
                                                std::vector<std::string>* hook_paths_out) {
  if (policy.kind == WrapPolicyKind::kSizeBased && policy.min_num_params <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("fsdp.min_num_params: ", policy.min_num_params,
                                                   " must be > 0 for SIZE_BASED wrapping"));
  }
  const ModuleIndex x = IndexModules(root);

  // Modules whose forward gathers a unit (the block type unless the model names another).
  const std::string hook_type = policy.hook_type.empty() ? policy.block_type : policy.hook_type;
  std::vector<std::string> hook_paths;
  for (const auto& [path, module] : x.modules) {
    if (!path.empty() && ModuleTypeMatches(module->name(), hook_type)) hook_paths.push_back(path);
  }
  if (hook_paths_out != nullptr) *hook_paths_out = hook_paths;

  UnitBuilder b(x);
  switch (policy.kind) {
    case WrapPolicyKind::kTransformerBlock:
      if (absl::Status s = AddBlockUnits(x, policy, b); !s.ok()) return s;
      break;
    case WrapPolicyKind::kPerLayer:
      AddLayerUnits(x, b);
      break;
    case WrapPolicyKind::kPerParameter:
      AddParameterUnits(x, b);
      break;
    case WrapPolicyKind::kSizeBased:
      AddSizeBasedUnits(x, policy, b);
      break;
  }
  UnitPlan root_unit = b.Root();
  std::vector<UnitPlan>& units = b.units();
  AssignHookPaths(x, hook_paths, units);
  if (!root_unit.params.empty()) units.insert(units.begin(), std::move(root_unit));
  return std::move(units);
}

}  // namespace shardline::fsdp
