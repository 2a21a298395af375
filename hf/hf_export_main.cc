// hf_export: a Shardline checkpoint as a Hugging Face folder (hf/export.h).
//
//   hf_export SPEC STEP_DIR OUT_DIR
//
// SPEC is the job's spec file (its model section gives what the checkpoint does not record:
// head counts, rope theta; a model.hf_dir is read). `shardctl export --format=hf` does the same
// for a job of a running cluster. Exit 0, 1 with the error on stderr, 2 for usage.
#include <iostream>

#include "absl/status/status.h"
#include "hf/export.h"
#include "spec/hf_config.h"
#include "spec/job_spec.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: hf_export SPEC STEP_DIR OUT_DIR\n";
    return 2;
  }
  shardline::spec::LoadOptions options;
  options.validate.check_files = false;  // Only the model section matters here.
  auto spec = shardline::spec::LoadJobSpecFile(argv[1], options);
  absl::Status s = spec.status();
  if (s.ok()) s = shardline::spec::ResolveHfModel(spec->mutable_model());
  if (s.ok()) s = shardline::hf::ExportHfFromStepDir(argv[2], spec->model(), argv[3]);
  if (!s.ok()) {
    std::cerr << "hf_export: " << s << "\n";
    return 1;
  }
  return 0;
}
