#include "spec/job_spec.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <google/protobuf/util/json_util.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "spec/defaults.h"
#include "spec/hf_config.h"
#include "spec/proto_yaml.h"

namespace shardline::spec {
namespace {

std::string DirName(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return "";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// Joins a relative path to `base` and removes "." and ".." lexically, so messages and listings
// show /work/out/checkpoints rather than /work/examples/../out/checkpoints. Without a base the
// path cannot be resolved: INVALID_ARGUMENT naming `field`.
absl::Status MakeAbsolute(const std::string& base, absl::string_view field, std::string* path) {
  if (path->empty() || absl::StartsWith(*path, "/")) return absl::OkStatus();
  if (base.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": relative path \"", *path,
        "\" cannot be resolved without a base directory (give an absolute path, or the "
        "submitter's base_dir)"));
  }
  *path = std::filesystem::path(absl::StrCat(base, "/", *path)).lexically_normal().string();
  return absl::OkStatus();
}

// The directory relative paths are taken against; "" when there is none.
absl::StatusOr<std::string> BaseDir(const LoadOptions& options) {
  const std::string& base = options.base_dir;
  if (!options.relative_to_cwd) {
    if (!base.empty() && !absl::StartsWith(base, "/")) {
      return absl::InvalidArgumentError(
          absl::StrCat("base_dir: \"", base, "\" is not an absolute path"));
    }
    return base;
  }
  if (!base.empty() && absl::StartsWith(base, "/")) return base;
  char cwd[4096];
  if (getcwd(cwd, sizeof(cwd)) == nullptr) return base;
  return base.empty() ? std::string(cwd) : absl::StrCat(cwd, "/", base);
}

}  // namespace

absl::StatusOr<JobSpec> ParseJobSpec(absl::string_view text, absl::string_view source) {
  JobSpec spec;
  RETURN_IF_ERROR(MergeYamlText(text, source, &spec, nullptr));
  return spec;
}

absl::Status ApplyOverride(JobSpec* spec, absl::string_view assignment) {
  return ApplyAssignment(assignment, spec, nullptr);
}

absl::StatusOr<JobSpec> LoadJobSpecText(absl::string_view text, absl::string_view source,
                                        const LoadOptions& options) {
  JobSpec spec;
  FieldPaths written;
  RETURN_IF_ERROR(MergeYamlText(text, source, &spec, &written));
  for (const std::string& assignment : options.overrides) {
    RETURN_IF_ERROR(ApplyAssignment(assignment, &spec, &written));
  }
  if (options.after_overrides) options.after_overrides(&spec);
  ASSIGN_OR_RETURN(const std::string base, BaseDir(options));
  RETURN_IF_ERROR(MakeAbsolute(base, "data.path", spec.mutable_data()->mutable_path()));
  RETURN_IF_ERROR(MakeAbsolute(base, "model.torchscript_path",
                               spec.mutable_model()->mutable_torchscript_path()));
  RETURN_IF_ERROR(MakeAbsolute(base, "checkpoint.dir", spec.mutable_checkpoint()->mutable_dir()));
  RETURN_IF_ERROR(MakeAbsolute(base, "checkpoint.init_from_safetensors",
                               spec.mutable_checkpoint()->mutable_init_from_safetensors()));
  RETURN_IF_ERROR(MakeAbsolute(base, "checkpoint.init_from_dcp",
                               spec.mutable_checkpoint()->mutable_init_from_dcp()));
  RETURN_IF_ERROR(MakeAbsolute(base, "checkpoint.resume_from",
                               spec.mutable_checkpoint()->mutable_resume_from()));
  RETURN_IF_ERROR(
      MakeAbsolute(base, "train.tensorboard_dir", spec.mutable_train()->mutable_tensorboard_dir()));
  RETURN_IF_ERROR(MakeAbsolute(base, "model.hf_dir", spec.mutable_model()->mutable_hf_dir()));
  RETURN_IF_ERROR(MakeAbsolute(base, "data.val_path", spec.mutable_data()->mutable_val_path()));
  RETURN_IF_ERROR(MakeAbsolute(base, "data.vocab_path", spec.mutable_data()->mutable_vocab_path()));
  for (int i = 0; i < spec.data().paths_size(); ++i) {
    RETURN_IF_ERROR(MakeAbsolute(base, absl::StrCat("data.paths[", i, "]"),
                                 spec.mutable_data()->mutable_paths(i)));
  }
  // The model of a Hugging Face folder: sizes from its config.json, where the files are visible
  // (the coordinator leaves it to the trainer).
  if (options.validate.check_files) RETURN_IF_ERROR(spec::ResolveHfModel(spec.mutable_model()));
  RETURN_IF_ERROR(FillDefaults(&spec, &written));
  RETURN_IF_ERROR(Validate(spec, options.validate));
  return spec;
}

absl::StatusOr<JobSpec> LoadJobSpecFile(const std::string& path, LoadOptions options) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("job spec \"", path, "\" cannot be read"));
  }
  std::stringstream text;
  text << in.rdbuf();
  if (options.base_dir.empty()) options.base_dir = DirName(path);
  return LoadJobSpecText(text.str(), path, options);
}

std::string JobSpecToYaml(const JobSpec& spec) { return MessageToYaml(spec); }

std::string JobSpecToJson(const JobSpec& spec) {
  std::string out;
  google::protobuf::util::JsonPrintOptions opts;
  opts.add_whitespace = true;
  opts.preserve_proto_field_names = true;
  // Cannot fail for a message without Any fields.
  (void)google::protobuf::util::MessageToJsonString(spec, &out, opts);
  return out;
}

}  // namespace shardline::spec
