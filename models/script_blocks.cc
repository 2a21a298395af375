#include "models/script_blocks.h"

#include <map>
#include <mutex>
#include <set>
#include <utility>

#include <ATen/core/grad_mode.h>
#include <ATen/core/stack.h>
#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/library.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/torch_status.h"

namespace shardline::models {
namespace {

constexpr char kRunBlock[] = "shardline::run_block";

// Every live ScriptBlocks' block instances: the script object -> its mirror and its owner (for the
// runner). Entries are removed by ~ScriptBlocks, so a lookup never sees a dead owner.
struct Registered {
  torch::nn::Module* mirror = nullptr;
  fsdp::UnitRunner* runner = nullptr;
};

absl::Status& PendingError() {
  thread_local absl::Status pending;
  return pending;
}

std::mutex& RegistryMutex() {
  static std::mutex* mu = new std::mutex;
  return *mu;
}

std::map<const c10::ivalue::Object*, Registered>& Registry() {
  static auto* registry = new std::map<const c10::ivalue::Object*, Registered>;
  return *registry;
}

// shardline::run_block(Any block, Tensor x, Tensor[] extra) -> Tensor: the block's forward as an
// FSDP unit. A composite kernel: autograd records the ops the block runs.
void RunBlockKernel(const c10::OperatorHandle& /*op*/, torch::jit::Stack* stack) {
  std::vector<at::Tensor> extra = torch::jit::pop(*stack).toTensorVector();
  at::Tensor x = torch::jit::pop(*stack).toTensor();
  c10::intrusive_ptr<c10::ivalue::Object> object = torch::jit::pop(*stack).toObject();
  Registered target;
  {
    std::lock_guard<std::mutex> lock(RegistryMutex());
    auto it = Registry().find(object.get());
    if (it != Registry().end()) target = it->second;
  }
  const torch::jit::Method forward = torch::jit::Module(object).get_method("forward");
  if (at::GradMode::is_enabled()) {
    for (size_t i = 0; i < extra.size(); ++i) {
      if (!extra[i].requires_grad()) continue;
      ThrowIfError(absl::InvalidArgumentError(absl::StrCat(
          "fsdp.block_class: ", ScriptClassName(*object->type()), ".forward's tensor argument ",
          i + 2,
          " requires grad; only the first argument (the hidden state) of a block may carry "
          "gradients (pass such a tensor through the first argument or compute it in the block)")));
    }
  }
  // By value: with activation checkpointing the engine calls the body again in backward.
  fsdp::UnitBody body = [forward, extra](const at::Tensor& h) {
    std::vector<c10::IValue> inputs;
    inputs.reserve(extra.size() + 1);
    inputs.emplace_back(h);
    for (const at::Tensor& e : extra) inputs.emplace_back(e);
    return forward(std::move(inputs)).toTensor();
  };
  at::Tensor y;
  try {
    y = target.mirror == nullptr ? body(x) : fsdp::RunUnit(target.runner, *target.mirror, x, body);
  } catch (const StatusException& e) {
    // The interpreter rewraps what passes through it; keep the status for TakeScriptBlockError.
    if (PendingError().ok()) PendingError() = e.status();
    throw;
  }
  torch::jit::push(*stack, std::move(y));
}

TORCH_LIBRARY(shardline, m) {
  // CONSERVATIVE: the block may update its buffers; the JIT must neither drop nor reorder it.
  m.def(torch::schema("run_block(Any block, Tensor x, Tensor[] extra) -> Tensor",
                      c10::AliasAnalysisKind::CONSERVATIVE),
        torch::dispatch(c10::DispatchKey::CompositeImplicitAutograd,
                        torch::CppFunction::makeFromBoxedFunction<&RunBlockKernel>()));
}

// The class of a graph value, or nullptr.
c10::ClassTypePtr ClassOf(const torch::jit::Value* v) { return v->type()->cast<c10::ClassType>(); }

// Rewrites the block calls in one graph block (recursing into if/loop bodies).
absl::Status RewriteCalls(torch::jit::Block* block, const std::string& block_class, int* count) {
  for (auto it = block->nodes().begin(); it != block->nodes().end();) {
    torch::jit::Node* n = *it;
    ++it;  // Before n may be destroyed.
    for (torch::jit::Block* sub : n->blocks()) {
      if (absl::Status s = RewriteCalls(sub, block_class, count); !s.ok()) return s;
    }
    if (n->kind() != c10::prim::CallMethod) continue;
    c10::ClassTypePtr callee = ClassOf(n->input(0));
    if (callee == nullptr || !ScriptClassMatches(*callee, block_class)) continue;
    const std::string method = n->s(c10::attr::name);
    if (method != "forward") {
      return absl::InvalidArgumentError(absl::StrCat(
          "fsdp.block_class: ", ScriptClassName(*callee), ".", method,
          " is called from outside the block; only calls of a block's forward (block(x, ...)) "
          "can be FSDP hook points"));
    }
    torch::jit::Graph* g = n->owningGraph();
    torch::jit::WithInsertPoint guard(n);
    std::vector<torch::jit::Value*> extra(n->inputs().begin() + 2, n->inputs().end());
    torch::jit::Node* list = g->insertNode(g->createList(c10::TensorType::get(), extra));
    torch::jit::Node* call = g->create(c10::Symbol::fromQualString(kRunBlock),
                                       {n->input(0), n->input(1), list->output()}, 1);
    call->output()->setType(n->output()->type());
    call->copyMetadata(n);
    g->insertNode(call);
    n->output()->replaceAllUsesWith(call->output());
    n->destroy();
    ++*count;
  }
  return absl::OkStatus();
}

// forward(self, Tensor, Tensor...) -> Tensor, or INVALID_ARGUMENT naming what is not.
absl::Status CheckBlockForward(const torch::jit::Module& block) {
  const std::string cls = ScriptClassName(*block.type());
  auto forward = block.find_method("forward");
  if (!forward.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("fsdp.block_class: ", cls, " has no forward method"));
  }
  const c10::FunctionSchema& schema = forward->function().getSchema();
  const auto& args = schema.arguments();
  if (args.size() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("fsdp.block_class: ", cls,
                     ".forward takes no input; a block's forward takes the hidden "
                     "state (a Tensor) first"));
  }
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i].type()->kind() != c10::TypeKind::TensorType) {
      return absl::InvalidArgumentError(absl::StrCat(
          "fsdp.block_class: ", cls, ".forward takes \"", args[i].name(), ": ",
          args[i].type()->annotation_str(),
          "\"; a block's forward must take Tensor arguments only (non-tensor settings belong in "
          "the module's attributes)"));
    }
  }
  if (schema.returns().size() != 1 ||
      schema.returns()[0].type()->kind() != c10::TypeKind::TensorType) {
    std::vector<std::string> outs;
    for (const auto& r : schema.returns()) outs.push_back(r.type()->annotation_str());
    return absl::InvalidArgumentError(absl::StrCat("fsdp.block_class: ", cls, ".forward returns ",
                                                   absl::StrJoin(outs, ", "),
                                                   "; a block's forward must return one Tensor"));
  }
  return absl::OkStatus();
}

bool IsUnder(const std::string& path, const std::string& ancestor) {
  return path == ancestor || absl::StartsWith(path, absl::StrCat(ancestor, "."));
}

}  // namespace

absl::Status TakeScriptBlockError() { return std::exchange(PendingError(), absl::OkStatus()); }

std::string ScriptClassName(const c10::ClassType& type) {
  if (!type.name().has_value()) return type.str();
  std::vector<std::string> kept;
  for (absl::string_view part : absl::StrSplit(type.name()->qualifiedName(), '.')) {
    if (part == "__torch__" || absl::StartsWith(part, "___torch_mangle_")) continue;
    kept.emplace_back(part);
  }
  return absl::StrJoin(kept, ".");
}

bool ScriptClassMatches(const c10::ClassType& type, absl::string_view block_class) {
  if (block_class.empty()) return false;
  if (absl::StartsWith(block_class, "__torch__.")) block_class.remove_prefix(10);
  const std::string name = ScriptClassName(type);
  return name == block_class || absl::EndsWith(name, absl::StrCat(".", block_class));
}

absl::StatusOr<std::unique_ptr<ScriptBlocks>> ScriptBlocks::Route(torch::jit::Module& script,
                                                                  const std::string& block_class,
                                                                  const MirrorLookup& mirror_of) {
  std::unique_ptr<ScriptBlocks> out(new ScriptBlocks());
  const std::vector<std::string> parts = absl::StrSplit(block_class, '.');
  out->bare_class_ = parts.back();
  std::set<std::string> classes_seen;
  std::vector<std::pair<std::string, torch::jit::Module>> blocks;
  for (const auto& item : script.named_modules()) {
    classes_seen.insert(ScriptClassName(*item.value.type()));
    if (item.name.empty() || !ScriptClassMatches(*item.value.type(), block_class)) continue;
    bool nested = false;
    for (const auto& b : blocks) nested = nested || IsUnder(item.name, b.first);
    if (!nested) blocks.emplace_back(item.name, item.value);
  }
  if (blocks.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("fsdp.block_class: no submodule of the TorchScript model has class \"",
                     block_class, "\"; its classes: ", absl::StrJoin(classes_seen, ", ")));
  }
  for (const auto& [path, block] : blocks) {
    if (absl::Status s = CheckBlockForward(block); !s.ok()) return s;
  }

  // Rewrite every method of every class but the block's (types are shared by their instances).
  std::set<c10::ClassType*> done;
  for (const torch::jit::Module& m : script.modules()) {
    c10::ClassType* type = m.type().get();
    if (!done.insert(type).second || ScriptClassMatches(*type, block_class)) continue;
    for (const torch::jit::Method& method : m.get_methods()) {
      torch::jit::GraphFunction& fn = torch::jit::toGraphFunction(method.function());
      absl::Status s = RewriteCalls(fn.graph()->block(), block_class, &out->call_sites_);
      if (!s.ok()) return s;
    }
  }
  if (out->call_sites_ == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "fsdp.block_class: the TorchScript model never calls ",
        ScriptClassName(*blocks[0].second.type()),
        ".forward from another module's method; blocks must be called as modules (block(x, ...))"));
  }

  std::lock_guard<std::mutex> lock(RegistryMutex());
  for (const auto& [path, block] : blocks) {
    torch::nn::Module* mirror = mirror_of(path);
    if (mirror == nullptr) continue;  // No parameters: nothing to gather.
    const c10::ivalue::Object* object = block._ivalue().get();
    Registry()[object] = Registered{mirror, nullptr};
    out->objects_.push_back(object);
    out->paths_.push_back(path);
  }
  return out;
}

ScriptBlocks::~ScriptBlocks() {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  for (const c10::ivalue::Object* object : objects_) Registry().erase(object);
}

void ScriptBlocks::set_runner(fsdp::UnitRunner* runner) {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  for (const c10::ivalue::Object* object : objects_) Registry()[object].runner = runner;
}

fsdp::UnitRunner* ScriptBlocks::runner() const {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  return objects_.empty() ? nullptr : Registry()[objects_[0]].runner;
}

}  // namespace shardline::models
