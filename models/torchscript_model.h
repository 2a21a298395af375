// TorchScriptModel: bring-your-own model. A TorchScript module file (torch.jit.script(m).save())
// whose forward maps int64 token ids [B, T] to logits [B, T, V].
//
// The scripted module's parameters and buffers are re-registered, under the same dotted names, in a
// tree of plain torch::nn::Modules (the same tensors, not copies), so the trainer and the FSDP
// engine see an ordinary module; rebinding a parameter's storage there rebinds it in the script
// too. Each mirror module is named after its script class's last component ("Block", "Linear"), so
// the wrap policies (fsdp/wrap_policy.h) see the model's structure.
//
// Hook points: with ModelConfig::block_class (fsdp.block_class) the calls of that class's
// forward are rewritten to run as FSDP units (models/script_blocks.h) and block_type() is the
// class's last component; without it the script has no hook points and block_type() is "" (the
// whole model is gathered at the start of forward, as one root unit or several).
//
// Thread safety: not thread-safe (see LanguageModel).
#ifndef SHARDLINE_MODELS_TORCHSCRIPT_MODEL_H_
#define SHARDLINE_MODELS_TORCHSCRIPT_MODEL_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "models/init.h"
#include "models/language_model.h"
#include "models/model_config.h"

namespace shardline::models {

class TorchScriptModel : public LanguageModel {
 public:
  // Loads spec.torchscript_path and routes spec.block_class's calls (if set). With
  // InitMode::kDeferred the parameters are storage-less and deferred_init() reads their values
  // from the file range by range (models/torchscript_file.h), unless the file must be loaded
  // whole (Describe() then says why). Errors: NOT_FOUND for a missing file, INVALID_ARGUMENT
  // when the file is not a TorchScript module or has no float parameters, and
  // ScriptBlocks::Route's for the block class (message naming fsdp.block_class, the class and
  // the method).
  static absl::StatusOr<std::unique_ptr<TorchScriptModel>> Create(
      const ModelConfig& spec, InitMode mode = InitMode::kMaterialized);
  ~TorchScriptModel() override;

  at::Tensor Forward(const at::Tensor& tokens) override;
  torch::nn::Module& module() override;
  std::shared_ptr<torch::nn::Module> module_ptr() override;
  void set_unit_runner(fsdp::UnitRunner* runner) override;
  const fsdp::ParamInitializer* deferred_init() const override;
  std::string block_type() const override;
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
};

}  // namespace shardline::models

#endif  // SHARDLINE_MODELS_TORCHSCRIPT_MODEL_H_
