#include "models/torchscript_model.h"

#include <sys/stat.h>
#include <unistd.h>

#include <map>
#include <set>
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/serialization/import.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/open_beneath.h"
#include "common/status_macros.h"
#include "common/torch_status.h"
#include "models/script_blocks.h"
#include "models/torchscript_file.h"

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
  // The steps of Create, in order. `path` is the configured path, for messages.
  // Opens the file beneath the path policy's roots into `file` and loads the module from it
  // (kDeferred: split, without parameter data where it can; `init` and `whole_reason`).
  absl::StatusOr<torch::jit::Module> Load(const std::string& path, InitMode mode);
  // `root` and the mirror tree of `script`'s modules (`mirror_at`).
  void MirrorModules(const torch::jit::Module& script, const std::string& block_class);
  // The script's parameters and buffers registered in the mirror tree; counts `num_params`.
  absl::Status MirrorTensors(const torch::jit::Module& script, const std::string& path);
  // `blocks`: the block class's calls routed through the engine (none without a block class).
  absl::Status RouteBlocks(const std::string& block_class, const std::string& path);

  // The module's file, opened once (first member: closed last, after `init` is done with it).
  struct File {
    int fd = -1;
    ~File() {
      if (fd >= 0) ::close(fd);
    }
  } file;
  std::shared_ptr<ScriptRootImpl> root;
  std::map<std::string, torch::nn::Module*> mirror_at;  // Module path -> mirror module.
  std::unique_ptr<ScriptBlocks> blocks;                 // Null without a block class.
  std::unique_ptr<ScriptFileInit> init;                 // kDeferred and split: the values.
  std::string whole_reason;                             // kDeferred but loaded whole: why.
  int64_t num_params = 0;
};

absl::StatusOr<std::unique_ptr<TorchScriptModel>> TorchScriptModel::Create(const ModelConfig& spec,
                                                                           InitMode mode) {
  const std::string& path = spec.torchscript_path;  // for messages
  auto impl = std::make_unique<Impl>();
  ASSIGN_OR_RETURN(torch::jit::Module script, impl->Load(path, mode));
  impl->MirrorModules(script, spec.block_class);
  RETURN_IF_ERROR(impl->MirrorTensors(script, path));
  if (impl->num_params == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.torchscript_path: \"", path, "\" has no parameters to train"));
  }
  RETURN_IF_ERROR(impl->RouteBlocks(spec.block_class, path));
  return std::unique_ptr<TorchScriptModel>(
      new TorchScriptModel(std::move(impl), spec.vocab_size, spec.block_size));
}

absl::StatusOr<torch::jit::Module> TorchScriptModel::Impl::Load(const std::string& path,
                                                                InitMode mode) {
  // Opened once beneath the path policy's roots (common/open_beneath.h); the loader and the
  // deferred initialization read it through this descriptor, so a file swapped for another
  // after the open is never read.
  absl::StatusOr<int> opened = OpenForRead(path, "model.torchscript_path");
  if (absl::IsNotFound(opened.status())) {
    return absl::NotFoundError(
        absl::StrCat("model.torchscript_path: \"", path, "\" does not exist"));
  }
  if (!opened.ok()) return opened.status();
  torch::jit::Module script;
  file.fd = *opened;
  const std::string read_path = absl::StrCat("/proc/self/fd/", *opened);
  absl::Status loaded;
  if (mode == InitMode::kDeferred) {
    absl::StatusOr<LoadedScript> split = LoadScriptForShardedInit(read_path);
    loaded = split.status();
    if (split.ok()) {
      script = split->module;
      init = std::move(split->init);
      whole_reason = std::move(split->whole_reason);
    }
  } else {
    loaded = TorchCall("load TorchScript module",
                       [&] { script = torch::jit::load(read_path, at::Device(at::kCPU)); });
  }
  if (loaded.code() == absl::StatusCode::kResourceExhausted) {  // Out of memory: not the file.
    return absl::ResourceExhaustedError(
        absl::StrCat("model.torchscript_path: \"", path, "\": ", loaded.message()));
  }
  if (!loaded.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.torchscript_path: \"", path, "\" is not a TorchScript module: ", loaded.message()));
  }
  return script;
}

void TorchScriptModel::Impl::MirrorModules(const torch::jit::Module& script,
                                           const std::string& block_class) {
  root = std::make_shared<ScriptRootImpl>(script);
  // The module tree first, each mirror named after its class's last component (its name without
  // the package: "Block"), so the wrap policies match modules by class.
  for (const auto& named : script.named_modules()) {
    if (named.name.empty()) continue;
    const std::string cls = ScriptClassName(*named.value.type());
    const size_t dot = cls.rfind('.');
    std::string bare = dot == std::string::npos ? cls : cls.substr(dot + 1);
    // A second class with the block class's last component keeps its dotted name, so
    // TRANSFORMER_BLOCK matches only the configured class.
    if (!block_class.empty() && !ScriptClassMatches(*named.value.type(), block_class) &&
        bare == std::vector<std::string>(absl::StrSplit(block_class, '.')).back()) {
      bare = cls;
    }
    const size_t parent_dot = named.name.rfind('.');
    const std::string parent =
        parent_dot == std::string::npos ? "" : named.name.substr(0, parent_dot);
    const std::string leaf =
        parent_dot == std::string::npos ? named.name : named.name.substr(parent_dot + 1);
    torch::nn::Module* parent_mirror = parent.empty() ? root.get() : mirror_at.at(parent);
    mirror_at[named.name] =
        parent_mirror->register_module(leaf, std::make_shared<torch::nn::Module>(bare)).get();
  }
}

absl::Status TorchScriptModel::Impl::MirrorTensors(const torch::jit::Module& script,
                                                   const std::string& path) {
  std::set<const c10::TensorImpl*> counted;
  for (const auto& named : script.named_parameters(/*recurse=*/true)) {
    if (!named.value.is_floating_point() || named.value.scalar_type() != at::kFloat) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model.torchscript_path: parameter \"", named.name, "\" is ",
          c10::toString(named.value.scalar_type()), "; only float32 parameters are supported"));
    }
    const size_t dot = named.name.rfind('.');
    torch::nn::Module* node =
        dot == std::string::npos ? root.get() : mirror_at.at(named.name.substr(0, dot));
    // Same tensor (TensorImpl) as the script's slot, so updates and rebinding are shared. A tied
    // tensor is registered under each of its names (the wrap policy keeps it once, in the root).
    node->register_parameter(dot == std::string::npos ? named.name : named.name.substr(dot + 1),
                             named.value, named.value.requires_grad());
    if (counted.insert(named.value.unsafeGetTensorImpl()).second) {
      num_params += named.value.numel();
    }
  }
  // Buffers too (a causal mask, rope tables), so moving the mirror to a device or dtype, and the
  // engine's broadcast of buffers from rank 0, reach the script's own tensors.
  for (const auto& named : script.named_buffers(/*recurse=*/true)) {
    const size_t dot = named.name.rfind('.');
    torch::nn::Module* node =
        dot == std::string::npos ? root.get() : mirror_at.at(named.name.substr(0, dot));
    node->register_buffer(dot == std::string::npos ? named.name : named.name.substr(dot + 1),
                          named.value);
  }
  return absl::OkStatus();
}

absl::Status TorchScriptModel::Impl::RouteBlocks(const std::string& block_class,
                                                 const std::string& path) {
  if (block_class.empty()) return absl::OkStatus();
  auto routed =
      ScriptBlocks::Route(root->script(), block_class, [this](const std::string& module_path) {
        auto it = mirror_at.find(module_path);
        return it == mirror_at.end() || it->second->parameters().empty() ? nullptr : it->second;
      });
  if (!routed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(routed.status().message(), " (model.torchscript_path \"", path, "\")"));
  }
  blocks = *std::move(routed);
  return absl::OkStatus();
}

TorchScriptModel::TorchScriptModel(std::unique_ptr<Impl> impl, int64_t vocab, int64_t block)
    : impl_(std::move(impl)), vocab_size_(vocab), block_size_(block) {}

TorchScriptModel::~TorchScriptModel() = default;

torch::nn::Module& TorchScriptModel::module() { return *impl_->root; }

std::shared_ptr<torch::nn::Module> TorchScriptModel::module_ptr() { return impl_->root; }

void TorchScriptModel::set_unit_runner(fsdp::UnitRunner* runner) {
  if (impl_->blocks != nullptr) impl_->blocks->set_runner(runner);
}

const fsdp::ParamInitializer* TorchScriptModel::deferred_init() const { return impl_->init.get(); }

std::string TorchScriptModel::block_type() const {
  return impl_->blocks == nullptr ? "" : impl_->blocks->bare_class();
}

at::Tensor TorchScriptModel::Forward(const at::Tensor& tokens) {
  // Root units were gathered at the start of forward; the blocks' calls gather their units.
  (void)TakeScriptBlockError();
  try {
    return impl_->root->script().forward({tokens}).toTensor();
  } catch (...) {
    // An engine status thrown inside a block came back rewrapped by the interpreter.
    absl::Status engine = TakeScriptBlockError();
    if (!engine.ok()) throw StatusException(engine);
    throw;
  }
}

double TorchScriptModel::TrainingFlopsPerToken(int64_t /*seq_len*/) const {
  return 6.0 * static_cast<double>(impl_->num_params);  // Attention cost unknown.
}

std::string TorchScriptModel::Describe() const {
  std::string blocks;
  if (impl_->blocks != nullptr) {
    blocks = absl::StrFormat(", %d %s blocks as FSDP hook points", impl_->blocks->paths().size(),
                             impl_->blocks->bare_class());
  }
  std::string load;
  if (impl_->init != nullptr) {
    load = ", parameters read from the file shard by shard";
  } else if (!impl_->whole_reason.empty()) {
    load = absl::StrCat(", loaded whole (", impl_->whole_reason, ")");
  }
  return absl::StrFormat("TorchScript module, vocab %d: %.2fM parameters%s%s", vocab_size_,
                         impl_->num_params / 1e6, blocks, load);
}

}  // namespace shardline::models
