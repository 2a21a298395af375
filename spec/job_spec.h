// Loading a job spec: the one pipeline shared by `trainer --spec`, `shardctl submit` and tests.
//
//   parse YAML/JSON  ->  apply --set overrides  ->  resolve relative paths  ->  read
//   model.hf_dir's config.json (spec/hf_config.h; only with validate.check_files)  ->  fill
//   defaults (spec/defaults.h)  ->  validate (spec/validate.h)
//
// Relative paths (every path_policy.h SpecPaths field: data.path, data.paths, data.val_path,
// data.vocab_path, model.torchscript_path, model.hf_dir, checkpoint.dir,
// checkpoint.init_from_safetensors) are taken relative to LoadOptions::base_dir (the spec file's
// directory for LoadJobSpecFile) and made absolute, so the job does not depend on the caller's
// working directory. The coordinator, which resolves specs sent as text (SubmitJobRequest
// spec_text), has no meaningful working directory: it sets relative_to_cwd = false, so a relative
// path needs an absolute base_dir from the client and is refused by name otherwise.
//
// Thread safety: pure functions (LoadJobSpecFile reads the file system).
#ifndef SHARDLINE_SPEC_JOB_SPEC_H_
#define SHARDLINE_SPEC_JOB_SPEC_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/job_spec.pb.h"
#include "spec/validate.h"

namespace shardline::spec {

struct LoadOptions {
  // `path=value` assignments applied in order after parsing, e.g. "fsdp.hybrid_shard_degree=3".
  std::vector<std::string> overrides;
  // Called once the overrides are applied, before paths are resolved, defaults filled and the
  // spec validated: the caller's last word on a field (the trainer puts its launch's world size
  // here, trainer/config.cc). Null: nothing.
  std::function<void(JobSpec*)> after_overrides;
  // Base for relative paths; LoadJobSpecFile sets it to the spec file's directory. Empty: the
  // current directory (when relative_to_cwd).
  std::string base_dir;
  // True: an empty or relative base_dir is taken against the current directory. False (the
  // coordinator): base_dir must be absolute when given, and without one every relative path is
  // INVALID_ARGUMENT naming its field.
  bool relative_to_cwd = true;
  ValidateOptions validate;
};

// Reads, parses, overrides, defaults and validates the spec file at `path`.
// Errors: NOT_FOUND when the file cannot be read; INVALID_ARGUMENT naming field and value.
absl::StatusOr<JobSpec> LoadJobSpecFile(const std::string& path, LoadOptions options = {});

// The same from text; `source` names it in errors.
absl::StatusOr<JobSpec> LoadJobSpecText(absl::string_view text, absl::string_view source,
                                        const LoadOptions& options);

// Parses YAML or JSON text into a spec without defaults or validation.
absl::StatusOr<JobSpec> ParseJobSpec(absl::string_view text, absl::string_view source = "");

// Applies one `path=value` override. Errors: INVALID_ARGUMENT naming the path and value.
absl::Status ApplyOverride(JobSpec* spec, absl::string_view assignment);

// Serializes a spec; parsing the result gives an equal message.
std::string JobSpecToYaml(const JobSpec& spec);
std::string JobSpecToJson(const JobSpec& spec);

}  // namespace shardline::spec

#endif  // SHARDLINE_SPEC_JOB_SPEC_H_
