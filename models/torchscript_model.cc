#include "models/torchscript_model.h"

#include <sys/stat.h>

#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/serialization/import.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "common/torch_status.h"

namespace shardline::models {
namespace {

// Root of the mirrored tree; train()/eval() also switch the script's mode (dropout etc.).
class ScriptRootImpl : public torch::nn::Module {
 public:
  explicit ScriptRootImpl(torch::jit::Module script)
      : torch::nn::Module("TorchScriptModel"), script_(std::move(script)) {}
  void train(bool on) override {
    torch::nn::Module::train(on);
    script_.train(on);
  }
  torch::jit::Module& script() { return script_; }

 private:
  torch::jit::Module script_;
};

}  // namespace

struct TorchScriptModel::Impl {
  std::shared_ptr<ScriptRootImpl> root;
  int64_t num_params = 0;
};

absl::StatusOr<std::unique_ptr<TorchScriptModel>> TorchScriptModel::Create(
    const ModelConfig& spec) {
  const std::string& path = spec.torchscript_path;
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(
        absl::StrCat("model.torchscript_path: \"", path, "\" does not exist"));
  }
  torch::jit::Module script;
  absl::Status loaded = TorchCall("load TorchScript module",
                                  [&] { script = torch::jit::load(path, at::Device(at::kCPU)); });
  if (!loaded.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.torchscript_path: \"", path, "\" is not a TorchScript module: ", loaded.message()));
  }
  auto impl = std::make_unique<Impl>();
  impl->root = std::make_shared<ScriptRootImpl>(script);
  for (const auto& named : script.named_parameters(/*recurse=*/true)) {
    if (!named.value.is_floating_point() || named.value.scalar_type() != at::kFloat) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model.torchscript_path: parameter \"", named.name, "\" is ",
          c10::toString(named.value.scalar_type()), "; only float32 parameters are supported"));
    }
    std::vector<std::string> parts = absl::StrSplit(named.name, '.');
    torch::nn::Module* node = impl->root.get();
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      std::shared_ptr<torch::nn::Module> child;
      auto children = node->named_children();
      if (children.contains(parts[i])) {
        child = children[parts[i]];
      } else {
        child = node->register_module(parts[i], std::make_shared<torch::nn::Module>("Module"));
      }
      node = child.get();
    }
    // Same tensor (TensorImpl) as the script's slot, so updates and rebinding are shared.
    node->register_parameter(parts.back(), named.value, named.value.requires_grad());
    impl->num_params += named.value.numel();
  }
  if (impl->num_params == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.torchscript_path: \"", path, "\" has no parameters to train"));
  }
  return std::unique_ptr<TorchScriptModel>(
      new TorchScriptModel(std::move(impl), spec.vocab_size, spec.block_size));
}

TorchScriptModel::TorchScriptModel(std::unique_ptr<Impl> impl, int64_t vocab, int64_t block)
    : impl_(std::move(impl)), vocab_size_(vocab), block_size_(block) {}

TorchScriptModel::~TorchScriptModel() = default;

torch::nn::Module& TorchScriptModel::module() { return *impl_->root; }

std::shared_ptr<torch::nn::Module> TorchScriptModel::module_ptr() { return impl_->root; }

at::Tensor TorchScriptModel::Forward(const at::Tensor& tokens) {
  // One unit: the engine gathers it at the start of forward like any root unit.
  return impl_->root->script().forward({tokens}).toTensor();
}

double TorchScriptModel::TrainingFlopsPerToken(int64_t /*seq_len*/) const {
  return 6.0 * static_cast<double>(impl_->num_params);  // Attention cost unknown.
}

std::string TorchScriptModel::Describe() const {
  return absl::StrFormat("TorchScript module, vocab %d: %.2fM parameters", vocab_size_,
                         impl_->num_params / 1e6);
}

}  // namespace shardline::models
