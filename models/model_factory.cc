#include "models/model_factory.h"

#include "common/status_macros.h"
#include "models/gpt.h"
#include "models/llama.h"
#include "models/torchscript_model.h"

namespace shardline::models {

absl::StatusOr<std::unique_ptr<LanguageModel>> CreateModel(const ModelConfig& config,
                                                           InitMode mode) {
  switch (config.architecture) {
    case Architecture::kGpt: {
      ASSIGN_OR_RETURN(auto m, GptModel::Create(config, mode));
      return std::unique_ptr<LanguageModel>(std::move(m));
    }
    case Architecture::kLlama: {
      ASSIGN_OR_RETURN(auto m, LlamaModel::Create(config, mode));
      return std::unique_ptr<LanguageModel>(std::move(m));
    }
    case Architecture::kTorchScript: {
      ASSIGN_OR_RETURN(auto m, TorchScriptModel::Create(config, mode));
      return std::unique_ptr<LanguageModel>(std::move(m));
    }
  }
  return absl::InvalidArgumentError("model.architecture: unknown");
}

}  // namespace shardline::models
