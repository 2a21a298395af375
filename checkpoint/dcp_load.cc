#include "checkpoint/dcp_load.h"

#include <cmath>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "checkpoint/dcp_reader.h"
#include "common/status_macros.h"
#include "common/torch_status.h"
#include "torch/torch.h"

namespace shardline::checkpoint {
namespace {

// The state kinds of each optimizer, as torch names them (and as our LocalState suffixes).
std::vector<std::string> StateKinds(const std::string& optimizer_kind) {
  if (optimizer_kind == "sgd") return {"momentum_buffer"};
  return {"exp_avg", "exp_avg_sq"};
}

// The checkpoint's key for one of `names` (a parameter's name and aliases) under `prefix`, or,
// with no prefix, under the ones a DCP save may give a parameter ("" and "model."); nullopt
// when none is there.
std::optional<std::string> Find(const DcpReader& r, const std::vector<std::string>& names,
                                const std::string& prefix, const std::string& suffix) {
  const std::vector<std::string> roots =
      prefix.empty() ? std::vector<std::string>{"", "model."} : std::vector<std::string>{prefix};
  for (const std::string& root : roots) {
    for (const std::string& n : names) {
      std::string key = absl::StrCat(root, n, suffix);
      if (r.tensors().count(key) != 0) return key;
    }
  }
  return std::nullopt;
}

std::string SomeNames(const DcpReader& r) {
  std::vector<std::string> names;
  for (const auto& [fqn, t] : r.tensors()) {
    if (names.size() == 6) {
      names.push_back("...");
      break;
    }
    names.push_back(fqn);
  }
  return absl::StrJoin(names, ", ");
}

// Copies elements [slice.start, slice.end) of tensor `key` into the slice (reading only the
// chunks that overlap them).
absl::Status CopyInto(const DcpReader& r, const std::string& key, const fsdp::ShardSlice& slice) {
  if (slice.end == slice.start) return absl::OkStatus();
  // Only this rank's range: the chunks it does not overlap are not read.
  ASSIGN_OR_RETURN(std::vector<float> part, r.ReadFloat32Range(key, slice.start, slice.end));
  return TorchCall("copy a DCP tensor into its shard", [&] {
    at::NoGradGuard no_grad;
    at::Tensor src = at::from_blob(part.data(), {slice.end - slice.start},
                                   at::TensorOptions().dtype(at::kFloat));
    slice.local.copy_(src);
  });
}

}  // namespace

absl::StatusOr<DcpLoadResult> LoadDcpIntoEngine(const std::string& dir,
                                                const std::string& optimizer_kind,
                                                fsdp::FsdpEngine* engine,
                                                fsdp::ShardedOptimizer* optimizer) {
  ASSIGN_OR_RETURN(DcpReader r, DcpReader::Open(dir));
  // Every name checked before anything is loaded: canonical name -> its keys.
  std::map<std::string, std::string> param_key;
  std::map<std::string, std::string> state_key;  // "<canonical>.<kind>" -> key
  std::vector<std::string> step_keys;
  std::string first_without_state, first_with_state;
  for (const auto& f : engine->flat_params()) {
    for (const fsdp::FlatParamEntry& e : f->entries()) {
      std::vector<std::string> names = {e.name};
      names.insert(names.end(), e.aliases.begin(), e.aliases.end());
      std::optional<std::string> key = Find(r, names, "", "");
      if (!key.has_value()) {
        return absl::InvalidArgumentError(
            absl::StrCat("checkpoint.init_from_dcp ", dir, ": parameter ", e.name,
                         " is not in the checkpoint (looked for it and \"model.", e.name,
                         "\"; it holds: ", SomeNames(r), ")"));
      }
      if (r.tensors().at(*key).shape != e.shape) {
        return absl::InvalidArgumentError(
            absl::StrCat("checkpoint.init_from_dcp ", dir, ": ", *key, " has shape [",
                         absl::StrJoin(r.tensors().at(*key).shape, ", "), "], the model's ", e.name,
                         " [", absl::StrJoin(e.shape, ", "), "]"));
      }
      param_key[e.name] = *key;
      bool has_all = true;
      for (const std::string& kind : StateKinds(optimizer_kind)) {
        std::optional<std::string> s = Find(r, names, "optimizer.state.", "." + kind);
        if (!s.has_value() || r.tensors().at(*s).shape != e.shape) {
          has_all = false;
          continue;
        }
        state_key[absl::StrCat(e.name, ".", kind)] = *s;
      }
      std::string& first = has_all ? first_with_state : first_without_state;
      if (first.empty()) first = e.name;
      if (std::optional<std::string> s = Find(r, names, "optimizer.state.", ".step")) {
        step_keys.push_back(*s);
      }
    }
  }
  const bool with_state = !first_with_state.empty();
  if (with_state && !first_without_state.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint.init_from_dcp ", dir, ": optimizer state (",
                     absl::StrJoin(StateKinds(optimizer_kind), ", "), ") is there for ",
                     first_with_state, " but not for ", first_without_state,
                     "; a checkpoint holds it for every parameter or for none"));
  }
  DcpLoadResult result;
  result.optimizer_state = with_state && optimizer != nullptr;
  // AdamW's step: one 0-d tensor per parameter, all equal.
  if (result.optimizer_state && optimizer_kind != "sgd") {
    std::optional<int64_t> step;
    for (const std::string& key : step_keys) {
      ASSIGN_OR_RETURN(std::vector<float> v, r.ReadFloat32(key));
      if (v.size() != 1 || v[0] < 0 || v[0] != std::floor(v[0])) {
        return absl::InvalidArgumentError(
            absl::StrCat("checkpoint.init_from_dcp ", dir, ": ", key, " is not a step count"));
      }
      const int64_t s = static_cast<int64_t>(v[0]);
      if (step.has_value() && *step != s) {
        return absl::InvalidArgumentError(absl::StrCat("checkpoint.init_from_dcp ", dir, ": ", key,
                                                       " is step ", s, ", another is ", *step));
      }
      step = s;
    }
    if (!step.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint.init_from_dcp ", dir, ": AdamW state without optimizer.state.<param>.step"));
    }
    result.step = *step;
  }

  engine->ReshardAll();  // Gathered copies would be stale.
  for (const fsdp::ShardSlice& slice : engine->LocalParamState()) {
    RETURN_IF_ERROR(CopyInto(r, param_key.at(slice.name), slice));
    ++result.tensors;
  }
  if (result.optimizer_state) {
    for (const fsdp::ShardSlice& slice : optimizer->LocalState()) {
      auto it = state_key.find(slice.name);
      if (it == state_key.end()) continue;  // Another optimizer's kind (not in use).
      RETURN_IF_ERROR(CopyInto(r, it->second, slice));
      ++result.tensors;
    }
    optimizer->set_step_count(result.step);
  }
  return result;
}

}  // namespace shardline::checkpoint
