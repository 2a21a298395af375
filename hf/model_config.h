// The models::ModelConfig of a Hugging Face folder's config.json, for LibTorch code, which never
// includes generated .pb.h files (see models/model_config.h).
//
// Thread safety: pure function over the file system.
#ifndef SHARDLINE_HF_MODEL_CONFIG_H_
#define SHARDLINE_HF_MODEL_CONFIG_H_

#include <string>

#include "absl/status/statusor.h"
#include "models/model_config.h"

namespace shardline::hf {

// Errors: as spec/hf_config.h ResolveHfModel.
absl::StatusOr<models::ModelConfig> ModelConfigFromHfDir(const std::string& hf_dir);

}  // namespace shardline::hf

#endif  // SHARDLINE_HF_MODEL_CONFIG_H_
