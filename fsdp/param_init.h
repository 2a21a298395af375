// Sharded initialization: parameters created without memory, and their initial values produced
// one parameter at a time, so that each rank materialises only its own shards (PyTorch FSDP's
// meta-device initialisation; docs/fsdp_step.md "Sharded initialization").
//
//   model built with storage-less parameters   (ReleaseParameterStorage after each leaf module)
//   FsdpEngine::Create(..., DeferredInit{&init, device})
//     for each parameter, in the model's order: init.ForEach -> InitialValue (transient, host)
//       -> the range this rank's shard holds is copied into the shard; the value is dropped
//
// A storage-less parameter keeps its shape, dtype and requires_grad but its storage holds no
// memory (0 bytes, null data pointer), like a parameter of a freed FSDP unit: reading it is an
// error. LibTorch cannot rebind a meta-device parameter to CPU or CUDA data (set_data refuses
// the device change), so "no storage" here means CPU tensors with an empty storage instead.
//
// Thread safety: InitialValue is immutable; a ParamInitializer's ForEach is const and may run on
// several threads at once (each call starts its own generator).
#ifndef SHARDLINE_FSDP_PARAM_INIT_H_
#define SHARDLINE_FSDP_PARAM_INIT_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include "absl/status/status.h"

namespace shardline::fsdp {

// One parameter's full initial value: a constant, the values themselves (float32, host,
// contiguous, the parameter's shape), or a reader that produces any range of them on demand (a
// file's parameter: only the ranges a rank's shards hold are ever read).
class InitialValue {
 public:
  // Writes elements [start, end) of the row-major flattened value into `dst` (as CopyRange).
  using RangeReader = std::function<void(int64_t start, int64_t end, const at::Tensor& dst)>;

  static InitialValue Fill(std::vector<int64_t> shape, double value);
  static InitialValue Values(at::Tensor values);
  static InitialValue Read(std::vector<int64_t> shape, RangeReader read);

  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t numel() const;
  // Writes elements [start, end) of the row-major flattened value into `dst` (1-D, end - start
  // elements, any floating dtype and device). Throws what LibTorch throws.
  void CopyRange(int64_t start, int64_t end, const at::Tensor& dst) const;

 private:
  std::vector<int64_t> shape_;
  double fill_ = 0;
  at::Tensor values_;  // Undefined for a constant and a reader.
  RangeReader read_;   // Empty unless made by Read.
};

// Produces a model's initial parameter values in a fixed order.
class ParamInitializer {
 public:
  virtual ~ParamInitializer() = default;
  // name: the parameter's name in named_parameters(); value: valid during the call only.
  using Visitor = std::function<absl::Status(const std::string& name, const InitialValue& value)>;
  // Calls `visit` once per parameter, one at a time (at most one value is alive at once), and
  // stops at the first error it returns. Every call produces the same values.
  virtual absl::Status ForEach(const Visitor& visit) const = 0;
};

// Where the FSDP engine builds shards for a model with storage-less parameters.
struct DeferredInit {
  const ParamInitializer* values = nullptr;  // Not owned; used during FsdpEngine::Create only.
  at::Device device = at::kCPU;              // Where the model computes (shards, gathers).
};

// Replaces every parameter of `module` (recursively) by a storage-less one of the same shape,
// dtype and requires_grad (the Variable is kept: references to it stay valid). Frees the memory
// the parameters held unless something else shares it.
void ReleaseParameterStorage(torch::nn::Module& module);
// The same for one tensor (a parameter held outside a torch::nn::Module: a TorchScript slot).
void ReleaseTensorStorage(at::Tensor& t);

// True when `t` is defined and its storage holds no memory although it has elements.
bool IsStorageless(const at::Tensor& t);

}  // namespace shardline::fsdp

#endif  // SHARDLINE_FSDP_PARAM_INIT_H_
