#include "hf/export.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "checkpoint/checkpoint_reader.h"
#include "common/status_macros.h"
#include "hf/weights.h"
#include "spec/hf_config.h"

namespace shardline::hf {

absl::Status ExportHfFromStepDir(const std::string& step_dir, const ModelSpec& model,
                                 const std::string& out_dir) {
  ASSIGN_OR_RETURN(std::string config, spec::HfConfigFromModelSpec(model));
  ASSIGN_OR_RETURN(auto reader, checkpoint::CheckpointReader::OpenDir(step_dir));
  RETURN_IF_ERROR(reader->VerifyFiles());
  const checkpoint::CheckpointMeta& meta = reader->meta();
  auto get = [&](const std::string& name) -> absl::StatusOr<HostTensor> {
    std::string stored = name;
    auto alias = meta.aliases.find(name);
    if (alias != meta.aliases.end()) stored = alias->second;
    for (const checkpoint::TensorInfo& t : meta.tensors) {
      if (t.name != stored) continue;
      HostTensor out;
      out.shape = t.shape;
      int64_t n = 1;
      for (int64_t d : t.shape) n *= d;
      out.values.resize(static_cast<size_t>(n));
      RETURN_IF_ERROR(reader->ReadElements(stored, 0, n, out.values.data()));
      return out;
    }
    return absl::InvalidArgumentError(absl::StrCat(
        step_dir, ": parameter ", name, " is not in the checkpoint: it does not hold a ",
        ModelSpec::Architecture_Name(model.architecture()), " model of the job's spec"));
  };
  return WriteHfFolder(out_dir, config, get);
}

}  // namespace shardline::hf
