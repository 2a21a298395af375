// A Shardline checkpoint's parameters as a Hugging Face folder (config.json + model.safetensors)
// that transformers' AutoModelForCausalLM.from_pretrained loads. Torch-free; used by
// `shardctl export --format=hf` and `checkpoint_export --hf_spec`.
//
// The checkpoint does not record the model's hyperparameters (head counts, rope theta), so the
// caller passes the job's model spec, resolved (spec/hf_config.h ResolveHfModel for an hf_dir job).
//
// Thread safety: pure function over the file system.
#ifndef SHARDLINE_HF_EXPORT_H_
#define SHARDLINE_HF_EXPORT_H_

#include <string>

#include "absl/status/status.h"
#include "proto/job_spec.pb.h"

namespace shardline::hf {

// Exports the committed checkpoint in `step_dir` (checksums verified) to `out_dir`.
// Errors: those of CheckpointReader (NOT_FOUND, FAILED_PRECONDITION, DATA_LOSS);
// INVALID_ARGUMENT for a TORCHSCRIPT spec or a checkpoint whose parameters do not match the spec
// (naming the parameter); INTERNAL for I/O.
absl::Status ExportHfFromStepDir(const std::string& step_dir, const ModelSpec& model,
                                 const std::string& out_dir);

}  // namespace shardline::hf

#endif  // SHARDLINE_HF_EXPORT_H_
