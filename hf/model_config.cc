#include "hf/model_config.h"

#include "common/status_macros.h"
#include "hf/config.h"
#include "proto/job_spec.pb.h"

namespace shardline::hf {

absl::StatusOr<models::ModelConfig> ModelConfigFromHfDir(const std::string& hf_dir) {
  ModelSpec spec;
  spec.set_hf_dir(hf_dir);
  RETURN_IF_ERROR(ResolveHfModel(&spec));
  return models::ModelConfigFromSpec(spec);
}

}  // namespace shardline::hf
