// LanguageModel: what the trainer needs from any model: token ids in, next-token logits out, a
// root torch::nn::Module to shard and optimize, and the RunUnit seam for the FSDP engine.
//
//   tokens [B, T] int64  ->  Forward  ->  logits [B, T, V] float32
//
// Implementations: GptModel (models/gpt.h), LlamaModel (models/llama.h), TorchScriptModel
// (models/torchscript_model.h). CreateModel (models/model_factory.h) picks one from a ModelConfig
// (models/model_config.h, converted from the job spec's ModelSpec).
//
// Thread safety: not thread-safe; one training thread uses a model.
#ifndef SHARDLINE_MODELS_LANGUAGE_MODEL_H_
#define SHARDLINE_MODELS_LANGUAGE_MODEL_H_

#include <cstdint>
#include <memory>
#include <set>
#include <string>

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include "fsdp/param_init.h"
#include "fsdp/unit_runner.h"

namespace shardline::models {

class LanguageModel {
 public:
  virtual ~LanguageModel() = default;

  // tokens: [B, T] int64 on the model's device, T <= block_size(). Returns [B, T, V] logits.
  // Throws what LibTorch throws (shape errors) and, from an attached engine, a failed
  // collective's common/torch_status.h StatusException; callers wrap it in TorchTry, which
  // returns that collective's own status.
  virtual at::Tensor Forward(const at::Tensor& tokens) = 0;

  // The root module: parameters(), named_parameters(), train()/eval(), to(device).
  virtual torch::nn::Module& module() = 0;
  // The same module, shared (the FSDP engine keeps a reference).
  virtual std::shared_ptr<torch::nn::Module> module_ptr() = 0;

  // Attaches the FSDP engine (or detaches it with nullptr); not owned, must outlive its use.
  // Forward then calls fsdp::RunUnit(runner, block, x, body) around each transformer block.
  virtual void set_unit_runner(fsdp::UnitRunner* runner) = 0;

  // Sharded initialization (fsdp/param_init.h): non-null when the model was created with
  // InitMode::kDeferred, its parameters storage-less; it produces their initial values for the
  // FSDP engine (FsdpEngine::Create with DeferredInit), which keeps only this rank's shards.
  // Null when the parameters hold their values (kMaterialized, and a TorchScript file that must
  // load whole). Owned by the model.
  virtual const fsdp::ParamInitializer* deferred_init() const { return nullptr; }

  // Module type of the blocks wrapped by RunUnit, for fsdp::WrapPolicy::block_type ("Block"),
  // or "" when the model has no hook points (TorchScript without fsdp.block_class: every unit is
  // gathered at the start of forward).
  virtual std::string block_type() const = 0;

  virtual int64_t vocab_size() const = 0;
  // Longest sequence Forward accepts; 0 when unknown (TorchScript).
  virtual int64_t block_size() const = 0;

  // Training FLOPs per token at sequence length `seq_len` (forward + backward), for the MFU
  // estimate: 6 * (non-embedding parameters) + 12 * n_layer * n_embd * seq_len (attention).
  virtual double TrainingFlopsPerToken(int64_t seq_len) const = 0;

  // A short description for logs ("GPT 4x64, 4 heads, vocab 256: 0.21M parameters").
  virtual std::string Describe() const = 0;

  // Unique parameter elements (a tied tensor registered under two modules counts once).
  int64_t NumParameters() {
    int64_t n = 0;
    std::set<const c10::TensorImpl*> seen;
    for (const at::Tensor& p : module().parameters()) {
      if (seen.insert(p.unsafeGetTensorImpl()).second) n += p.numel();
    }
    return n;
  }
};

}  // namespace shardline::models

#endif  // SHARDLINE_MODELS_LANGUAGE_MODEL_H_
