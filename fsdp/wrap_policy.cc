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
  // Modules in pre-order, with the root itself as path "".
  std::vector<std::pair<std::string, const torch::nn::Module*>> modules;
  modules.emplace_back("", &root);
  for (const auto& item : root.named_modules(/*name_prefix=*/"", /*include_self=*/false)) {
    modules.emplace_back(item.key(), item.value().get());
  }

  // Parameters deduplicated by TensorImpl, in first-seen order.
  std::vector<ParamInfo> params;
  std::map<const c10::TensorImpl*, size_t> index_of;
  std::vector<std::vector<size_t>> direct(modules.size());  // module -> param indices
  for (size_t m = 0; m < modules.size(); ++m) {
    const std::string& path = modules[m].first;
    for (const auto& item : modules[m].second->named_parameters(/*recurse=*/false)) {
      const std::string full = path.empty() ? item.key() : absl::StrCat(path, ".", item.key());
      const c10::TensorImpl* impl = item.value().unsafeGetTensorImpl();
      auto it = index_of.find(impl);
      if (it == index_of.end()) {
        index_of[impl] = params.size();
        params.push_back(ParamInfo{full, {}, item.value(), {path}});
        direct[m].push_back(params.size() - 1);
      } else {
        params[it->second].aliases.push_back(full);
        params[it->second].owners.insert(path);
      }
    }
  }
  auto is_shared = [&](size_t p) {
    return params[p].owners.size() > 1 || !params[p].aliases.empty();
  };

  const std::string hook_type = policy.hook_type.empty() ? policy.block_type : policy.hook_type;
  std::vector<std::string> hook_paths;
  std::set<std::string> types_seen;
  for (const auto& [path, module] : modules) {
    types_seen.insert(std::string(BareType(module->name())));
    if (!path.empty() && ModuleTypeMatches(module->name(), hook_type)) hook_paths.push_back(path);
  }
  if (hook_paths_out != nullptr) *hook_paths_out = hook_paths;

  std::vector<bool> taken(params.size(), false);
  std::vector<UnitPlan> units;
  auto add_unit = [&](std::string name, const std::vector<size_t>& members) {
    UnitPlan u;
    u.name = std::move(name);
    for (size_t p : members) {
      taken[p] = true;
      u.params.push_back(UnitPlanParam{params[p].name, params[p].aliases, params[p].param});
    }
    if (!u.params.empty()) units.push_back(std::move(u));
  };
  auto subtree_params = [&](const std::string& prefix) {
    std::vector<size_t> out;
    for (size_t m = 0; m < modules.size(); ++m) {
      if (!IsUnder(modules[m].first, prefix)) continue;
      for (size_t p : direct[m]) {
        if (!taken[p] && !is_shared(p)) out.push_back(p);
      }
    }
    return out;
  };

  switch (policy.kind) {
    case WrapPolicyKind::kTransformerBlock: {
      std::vector<std::string> blocks;
      for (const auto& [path, module] : modules) {
        if (path.empty() || !ModuleTypeMatches(module->name(), policy.block_type)) continue;
        bool nested = false;
        for (const std::string& b : blocks) nested = nested || IsUnder(path, b);
        if (!nested) blocks.push_back(path);
      }
      if (blocks.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("fsdp.auto_wrap_policy: TRANSFORMER_BLOCK found no module of type \"",
                         policy.block_type, "\"; module types: ", absl::StrJoin(types_seen, ", ")));
      }
      for (const std::string& b : blocks) add_unit(b, subtree_params(b));
      break;
    }
    case WrapPolicyKind::kPerLayer:
      for (size_t m = 1; m < modules.size(); ++m) {
        std::vector<size_t> mine;
        for (size_t p : direct[m]) {
          if (!is_shared(p)) mine.push_back(p);
        }
        add_unit(modules[m].first, mine);
      }
      break;
    case WrapPolicyKind::kPerParameter:
      for (size_t p = 0; p < params.size(); ++p) {
        if (!is_shared(p)) add_unit(params[p].name, {p});
      }
      break;
    case WrapPolicyKind::kSizeBased: {
      std::vector<size_t> group;
      int64_t count = 0;
      std::string first_path;
      for (size_t m = 1; m < modules.size(); ++m) {
        for (size_t p : direct[m]) {
          if (is_shared(p)) continue;
          if (group.empty()) first_path = modules[m].first;
          group.push_back(p);
          count += params[p].param.numel();
        }
        if (!group.empty() && count >= policy.min_num_params) {
          add_unit(first_path, group);
          group.clear();
          count = 0;
        }
      }
      break;  // A short last group stays untaken: the root gets it.
    }
  }

  // The root: everything not taken, shared parameters included.
  std::vector<size_t> rest;
  for (size_t p = 0; p < params.size(); ++p) {
    if (!taken[p]) rest.push_back(p);
  }
  UnitPlan root_unit;
  root_unit.name = "root";
  for (size_t p : rest) {
    root_unit.params.push_back(UnitPlanParam{params[p].name, params[p].aliases, params[p].param});
  }

  // Gather point: the innermost hook module containing every owner of every parameter.
  std::map<const c10::TensorImpl*, const std::set<std::string>*> owners_of;
  for (const ParamInfo& p : params) owners_of[p.param.unsafeGetTensorImpl()] = &p.owners;
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
  if (!root_unit.params.empty()) units.insert(units.begin(), std::move(root_unit));
  return units;
}

}  // namespace shardline::fsdp
