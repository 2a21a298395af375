// CreateModel: the one place a ModelConfig (from the job spec's ModelSpec via
// ModelConfigFromSpec, models/model_config.h) becomes a LanguageModel.
//
// Thread safety: pure function (reads the TorchScript file, if any).
#ifndef SHARDLINE_MODELS_MODEL_FACTORY_H_
#define SHARDLINE_MODELS_MODEL_FACTORY_H_

#include <memory>

#include "absl/status/statusor.h"
#include "models/init.h"
#include "models/language_model.h"
#include "models/model_config.h"

namespace shardline::models {

// Builds the architecture on CPU with weights initialised from config.init_seed (move it with
// module().to(device)). With InitMode::kDeferred (models/init.h) the GPT and Llama parameters
// hold no memory and deferred_init() produces their values for the FSDP engine, which builds
// only this rank's shards (sharded initialization); so do a TorchScript model's, read from its file
// range by range (models/torchscript_file.h).
// Errors: INVALID_ARGUMENT naming the bad size; NOT_FOUND for a missing TorchScript file;
// RESOURCE_EXHAUSTED when memory runs out.
absl::StatusOr<std::unique_ptr<LanguageModel>> CreateModel(const ModelConfig& config,
                                                           InitMode mode = InitMode::kMaterialized);

}  // namespace shardline::models

#endif  // SHARDLINE_MODELS_MODEL_FACTORY_H_
