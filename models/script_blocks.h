// ScriptBlocks: FSDP hook points inside a TorchScript model that has no Shardline code in it.
//
// A built-in model calls fsdp::RunUnit around each block (fsdp/unit_runner.h); a scripted model
// cannot. So after loading, every call `block(x, *extra)` of a module whose class is the
// configured block class (fsdp.block_class, PyTorch FSDP's transformer_layer_cls) is rewritten in
// the script's graphs, in every method of every other class (ModuleList loops are unrolled by the
// scripting compiler, so there is one call node per block, in forward or in a helper method):
//
//   %y = prim::CallMethod[name="forward"](%block, %x, %mask)
//     ->  %extra = prim::ListConstruct(%mask)
//         %y = shardline::run_block(%block, %x, %extra)
//
// The operator (registered here with TORCH_LIBRARY) finds the block instance's mirror module
// (models/torchscript_model.h: the same parameter tensors in a plain torch::nn::Module tree) and
// calls fsdp::RunUnit(runner, mirror, x, body), where body runs the block's original forward.
// The engine then gathers, frees, prefetches, rate-limits and checkpoints the block exactly as
// for a built-in block, and autograd goes through the operator (a composite kernel: the block's
// own ops record the graph).
//
// What a block must be (checked by Route, INVALID_ARGUMENT naming the class and method):
//   forward(self, x: Tensor, *extra: Tensor) -> Tensor. Tensors only: rope tables, masks and the
//   like pass as extra inputs; they must not need gradients (the engine's checkpointing and
//   gather hooks follow the first input only; checked when the block runs). Non-tensor inputs,
//   Optional tensors, several outputs and calls of other block methods are refused.
// Blocks nested in blocks are part of the outer block's unit; calls inside the block class are
// left alone.
//
// Thread safety: Route and the destructor from one thread; the operator may run on any thread
// (a registry guarded by a mutex maps script objects to their mirrors).
#ifndef SHARDLINE_MODELS_SCRIPT_BLOCKS_H_
#define SHARDLINE_MODELS_SCRIPT_BLOCKS_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/jit_type.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/nn/module.h>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "fsdp/unit_runner.h"

namespace shardline::models {

// A script class's name without "__torch__." and the "___torch_mangle_N" components the compiler
// adds to distinguish same-named classes: "mymodel.Block".
std::string ScriptClassName(const c10::ClassType& type);

// True when `block_class` names `type`: its last component ("Block") or a dotted suffix
// ("mymodel.Block") of ScriptClassName(type).
bool ScriptClassMatches(const c10::ClassType& type, absl::string_view block_class);

// The status a block's FSDP engine call threw (common/torch_status.h StatusException: a lost
// peer, a timed-out gather) during a script forward on this thread, then cleared; OK if none.
// The TorchScript interpreter rewraps exceptions that pass through it, so the caller of the
// script's forward gets back the engine's status from here.
absl::Status TakeScriptBlockError();

class ScriptBlocks {
 public:
  // Returns the mirror module at a module path of the script ("blocks.0"), nullptr if none.
  using MirrorLookup = std::function<torch::nn::Module*(const std::string& path)>;

  // Finds the outermost submodules of class `block_class` in `script`, checks their forward and
  // rewrites the calls to them (see the file comment). `script` is modified in place and must
  // outlive the returned object, which unregisters the blocks when destroyed.
  // Errors: INVALID_ARGUMENT naming the field fsdp.block_class and the class when no submodule
  // has that class (listing the classes seen), when the block's forward has a non-tensor input or
  // output, when a block's other methods are called from outside, or when no call is found.
  static absl::StatusOr<std::unique_ptr<ScriptBlocks>> Route(torch::jit::Module& script,
                                                             const std::string& block_class,
                                                             const MirrorLookup& mirror_of);
  ~ScriptBlocks();
  ScriptBlocks(const ScriptBlocks&) = delete;
  ScriptBlocks& operator=(const ScriptBlocks&) = delete;

  // The engine that shards the blocks (nullptr: run them directly).
  void set_runner(fsdp::UnitRunner* runner);
  fsdp::UnitRunner* runner() const;

  // Module paths of the blocks, in module order ("blocks.0", ...).
  const std::vector<std::string>& paths() const { return paths_; }
  // Calls rewritten, over all methods (one per block for an unrolled ModuleList loop).
  int call_sites() const { return call_sites_; }
  // The last component of the class name, used as the mirror modules' name ("Block").
  const std::string& bare_class() const { return bare_class_; }

 private:
  ScriptBlocks() = default;

  std::vector<std::string> paths_;
  std::vector<const c10::ivalue::Object*> objects_;
  int call_sites_ = 0;
  std::string bare_class_;
};

}  // namespace shardline::models

#endif  // SHARDLINE_MODELS_SCRIPT_BLOCKS_H_
