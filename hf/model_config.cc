#include "hf/model_config.h"

#include "common/status_macros.h"
#include "proto/job_spec.pb.h"
#include "spec/hf_config.h"

namespace shardline::hf {

absl::StatusOr<models::ModelConfig> ModelConfigFromHfDir(const std::string& hf_dir) {
  ModelSpec spec;
  spec.set_hf_dir(hf_dir);
  RETURN_IF_ERROR(spec::ResolveHfModel(&spec));
  return models::ModelConfigFromSpec(spec);
}

}  // namespace shardline::hf
