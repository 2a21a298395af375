// TorchScriptModel: bring-your-own model. A TorchScript module file (torch.jit.script(m).save())
// whose forward maps int64 token ids [B, T] to logits [B, T, V].
//
// The scripted module's parameters are re-registered, under the same dotted names, in a tree of
// plain torch::nn::Modules (the same tensors, not copies), so the trainer and the FSDP engine see
// an ordinary module; rebinding a parameter's storage there rebinds it in the script too.
// A script has no RunUnit hook points: the whole model is one FSDP unit (block_type() == "").
//
// Thread safety: not thread-safe (see LanguageModel).
#ifndef SHARDLINE_MODELS_TORCHSCRIPT_MODEL_H_
#define SHARDLINE_MODELS_TORCHSCRIPT_MODEL_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "models/language_model.h"
#include "models/model_config.h"

namespace shardline::models {

class TorchScriptModel : public LanguageModel {
 public:
  // Loads spec.torchscript_path. Errors: NOT_FOUND for a missing file, INVALID_ARGUMENT when
  // the file is not a TorchScript module or has no float parameters.
  static absl::StatusOr<std::unique_ptr<TorchScriptModel>> Create(const ModelConfig& spec);
  ~TorchScriptModel() override;

  at::Tensor Forward(const at::Tensor& tokens) override;
  torch::nn::Module& module() override;
  std::shared_ptr<torch::nn::Module> module_ptr() override;
  void set_unit_runner(fsdp::UnitRunner* runner) override { runner_ = runner; }
  std::string block_type() const override { return ""; }
  int64_t vocab_size() const override { return vocab_size_; }
  int64_t block_size() const override { return block_size_; }
  double TrainingFlopsPerToken(int64_t seq_len) const override;
  std::string Describe() const override;

 private:
  struct Impl;
  explicit TorchScriptModel(std::unique_ptr<Impl> impl, int64_t vocab, int64_t block);
  std::unique_ptr<Impl> impl_;
  int64_t vocab_size_;
  int64_t block_size_;
  fsdp::UnitRunner* runner_ = nullptr;
};

}  // namespace shardline::models

#endif  // SHARDLINE_MODELS_TORCHSCRIPT_MODEL_H_
