#include "checkpoint/dcp_export.h"

#include <cctype>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/durable_file.h"
#include "checkpoint/format.h"
#include "checkpoint/safetensors.h"

namespace shardline::checkpoint {
namespace {

// {"saved_offsets": [0, ...]} for a whole tensor of `rank` dimensions.
std::string ShardingInfo(const std::vector<CheckpointExportEntry>& entries) {
  std::vector<std::string> items;
  for (const CheckpointExportEntry& e : entries) {
    std::vector<int> zeros(e.shape.size(), 0);
    // Names are ours ([A-Za-z0-9_.]); no JSON escaping needed, but checked where built.
    items.push_back(
        absl::StrCat("\"", e.name, "\":{\"saved_offsets\":[", absl::StrJoin(zeros, ","), "]}"));
  }
  return absl::StrCat("{", absl::StrJoin(items, ","), "}");
}

bool PlainName(const std::string& name) {
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-')) {
      return false;
    }
  }
  return !name.empty();
}

}  // namespace

absl::Status ExportDcpFromStepDir(const std::string& step_dir, const std::string& out_dir,
                                  bool with_optimizer) {
  absl::StatusOr<std::unique_ptr<CheckpointReader>> reader = CheckpointReader::OpenDir(step_dir);
  if (!reader.ok()) return reader.status();
  const CheckpointMeta& meta = (*reader)->meta();
  if (absl::Status s = (*reader)->VerifyFiles(); !s.ok()) return s;
  if (with_optimizer && meta.optimizer.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(step_dir,
                     ": the checkpoint holds no optimizer state (--with_optimizer needs one saved "
                     "with it)"));
  }
  // Parameters and their aliases, in name order, then the optimizer's state.
  std::map<std::string, const TensorInfo*> params;
  std::vector<const TensorInfo*> states;
  for (const TensorInfo& t : meta.tensors) {
    if (t.name.find('#') == std::string::npos) {
      params[t.name] = &t;
    } else {
      states.push_back(&t);
    }
  }
  for (const auto& [alias, canonical] : meta.aliases) {
    auto it = params.find(canonical);
    if (it != params.end()) params[alias] = it->second;
  }
  std::vector<CheckpointExportEntry> entries;
  for (const auto& [name, t] : params) entries.push_back({name, t->name, t->shape});
  if (with_optimizer) {
    std::map<std::string, bool> stepped;  // Params with AdamW state: they get a step.
    for (const TensorInfo* t : states) {
      std::string param, state;
      if (!SplitStateName(t->name, &param, &state)) continue;
      entries.push_back({absl::StrCat("optimizer.state.", param, ".", state), t->name, t->shape});
      if (state == "exp_avg") stepped[param] = true;
    }
    for (const auto& [param, unused] : stepped) {
      entries.push_back({absl::StrCat("optimizer.state.", param, ".step"),
                         "",
                         {},
                         static_cast<float>(meta.optimizer_step)});
    }
  }
  for (const CheckpointExportEntry& e : entries) {
    if (!PlainName(e.name)) {
      return absl::InvalidArgumentError(
          absl::StrCat(step_dir, ": tensor name \"", e.name, "\" is not a plain dotted name"));
    }
  }
  if (absl::Status s = MakeDirsDurable(out_dir); !s.ok()) return s;
  return WriteSafetensorsFromCheckpoint(**reader, entries,
                                        {{"format", "pt"},
                                         {"DCP_VERSION", "1.0"},
                                         {"DCP_SHARDING_INFO", ShardingInfo(entries)},
                                         {"step", absl::StrCat(meta.step)},
                                         {"model_fingerprint", meta.model_fingerprint}},
                                        absl::StrCat(out_dir, "/", kDcpFileName));
}

}  // namespace shardline::checkpoint
