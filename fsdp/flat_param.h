// FlatParam: one FSDP unit's parameters as one flat fp32 buffer, sharded S ways.
//
// Layout (llm.c style: sharding is offset arithmetic):
//   flat    = concat(p.flatten() for p in params)            numel()        = sum of numels
//   padded  = flat ++ zeros                                   padded_numel() = ceil(numel / S) * S
//   shard r = padded[r * shard_numel(), (r + 1) * shard_numel())
// Each rank keeps only its own shard as the fp32 master copy (shard(), [shard_numel]). While the
// unit computes, the full padded buffer (full(), [padded_numel]) holds all shards and every
// module parameter is a view into it (rebound once with set_data at construction; "freeing" the
// buffer releases its storage's memory and "allocating" gives the same storage new memory, so the
// views, and autograd's saved views of them, see whatever is gathered next).
// Gradients: full_grad() ([padded_numel]) is allocated before a unit's backward and every
// parameter's .grad is set to a view into it, so LibTorch's AccumulateGrad adds into the flat
// buffer in place; the engine reduce-scatters it into shard_grad() ([shard_numel]).
// With S == 1 the full buffer shares memory with the shard (nothing to gather or free).
// Mixed precision (compute_dtype bf16/fp16): the shard and its gradient stay fp32 (the master
// copy the optimizer updates), while full() and full_grad() are in compute_dtype and the module's
// parameters become compute_dtype views into full(); the engine casts the shard before gathering
// it. Then even S == 1 has a separate full buffer (a cast copy of the shard), gathered and freed
// like any other (full_is_shard() is false).
// CPU offload (cpu_offload, PyTorch's CPUOffload(params=True)): the shard and its gradient live
// in host memory, pinned when the parameters are on CUDA so the engine's host->device and
// device->host copies can be asynchronous; full() and full_grad() stay on the parameters'
// device. Like mixed precision, S == 1 then has a separate full buffer (a device copy of the
// host shard). On a CPU model the "host" shard is simply a separate CPU tensor (how the CPU
// tests check the engine's offload bookkeeping).
//
// The FlatParam does no communication; fsdp/fsdp_engine.cc drives it.
// Thread safety: not thread-safe; used by the training (and autograd) thread only.
#ifndef SHARDLINE_FSDP_FLAT_PARAM_H_
#define SHARDLINE_FSDP_FLAT_PARAM_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"

namespace shardline::fsdp {

// One original parameter inside a flat parameter.
struct FlatParamEntry {
  std::string name;                  // Canonical name ("blocks.0.attn.qkv.weight").
  std::vector<std::string> aliases;  // Other names of the same tensor (tied weights).
  at::Tensor param;                  // The module's parameter (a leaf Variable).
  std::vector<int64_t> shape;        // Global shape.
  int64_t offset = 0;                // Start in the flat buffer.
  int64_t numel = 0;
};

class FlatParam {
 public:
  // Takes the parameters' current values (this rank keeps its shard of them) and rebinds each
  // parameter as a view into the full buffer. All parameters must be contiguous-able fp32 CPU or
  // CUDA tensors on one device. Errors: INVALID_ARGUMENT for an empty list, a dtype other than
  // float32, mixed devices, or shard_rank outside [0, shard_count).
  // compute_dtype: float32 (default), bfloat16 or float16. cpu_offload: the shard and its
  // gradient live in (pinned, for CUDA parameters) host memory; see above.
  static absl::StatusOr<std::unique_ptr<FlatParam>> Create(
      std::string name, std::vector<FlatParamEntry> entries, int shard_rank, int shard_count,
      at::ScalarType compute_dtype = at::kFloat, bool cpu_offload = false);

  // Sharded initialization (fsdp/param_init.h): the parameters are storage-less (shapes only)
  // and `device` is where the module computes. Allocates only this rank's shard, zeros, for
  // the caller to fill through LocalRangeOf (FsdpEngine does, from the model's initializer),
  // and rebinds the parameters into the full buffer on `device` (held only while Create runs:
  // one unit's gathered size). Errors: as Create.
  static absl::StatusOr<std::unique_ptr<FlatParam>> CreateUninitialized(
      std::string name, std::vector<FlatParamEntry> entries, at::Device device, int shard_rank,
      int shard_count, at::ScalarType compute_dtype = at::kFloat, bool cpu_offload = false);

  const std::string& name() const { return name_; }
  const std::vector<FlatParamEntry>& entries() const { return entries_; }
  int64_t numel() const { return numel_; }
  int64_t padded_numel() const { return shard_numel_ * shard_count_; }
  int64_t shard_numel() const { return shard_numel_; }
  // Elements of this rank's shard that are real parameters (the rest is padding), a prefix.
  int64_t valid_shard_numel() const;
  int shard_rank() const { return shard_rank_; }
  int shard_count() const { return shard_count_; }
  // [start, end) of this rank's shard in the flat (unpadded) index space.
  int64_t shard_begin() const { return shard_rank_ * shard_numel_; }

  // fp32 master shard, [shard_numel]. Updated in place by the optimizer.
  const at::Tensor& shard() const { return shard_; }
  // Reduced gradient shard, [shard_numel]; zeros until the first reduction.
  const at::Tensor& shard_grad() const { return shard_grad_; }

  // Full gathered buffer, [padded_numel]. Its memory exists only while full_allocated().
  const at::Tensor& full() const { return full_; }
  bool full_allocated() const { return full_allocated_; }
  // Gives the full buffer memory (contents undefined until gathered). No-op if allocated.
  void AllocateFull();
  // Releases the full buffer's memory; the parameter views must not be read until the next
  // AllocateFull + gather. No-op with S == 1 (the buffer is the shard).
  void FreeFull();
  // True when S == 1: the full buffer is the shard itself (never gathered or freed).
  bool full_is_shard() const { return shard_count_ == 1 && !mixed_ && !offloaded_; }
  // True when compute_dtype is not float32 (see above).
  bool mixed() const { return mixed_; }
  at::ScalarType compute_dtype() const { return full_.scalar_type(); }
  // True when the shard and its gradient live in host memory (cpu_offload).
  bool offloaded() const { return offloaded_; }
  // Where the module computes: the device of full() and full_grad().
  at::Device device() const { return full_.device(); }

  // Flat gradient buffer, [padded_numel]; parameters' .grad are views into it while allocated.
  const at::Tensor& full_grad() const { return full_grad_; }
  bool full_grad_allocated() const { return full_grad_.defined(); }
  // Allocates zeros and points every parameter's .grad into it. No-op if allocated.
  void AllocateFullGrad();
  // Drops the flat gradient and every parameter's .grad.
  void FreeFullGrad();

  // Bytes held right now: shard + shard grad (persistent; in host memory when offloaded), full
  // buffers (transient, on device()).
  int64_t shard_bytes() const;
  int64_t shard_grad_bytes() const;
  int64_t full_bytes() const;       // 0 when freed (or when it is the shard).
  int64_t full_grad_bytes() const;  // 0 when not allocated.

  // For entry i: [start, end) of its elements (in the parameter's own flattened index space)
  // held by this rank's shard, and the matching offset in shard(). start == end when none.
  struct LocalRange {
    int64_t start = 0, end = 0;  // In the parameter's flattened elements.
    int64_t shard_offset = 0;    // Where element `start` sits in shard().
  };
  LocalRange LocalRangeOf(size_t entry_index) const;

 private:
  FlatParam() = default;
  // Checks the arguments and lays out the entries (offsets, shard size); no buffers yet.
  static absl::StatusOr<std::unique_ptr<FlatParam>> Plan(
      std::string name, std::vector<FlatParamEntry> entries, at::Device device, int shard_rank,
      int shard_count, at::ScalarType compute_dtype, bool cpu_offload);
  // Makes shard_ a copy of flat's range (padded flat buffer on `device`), or zeros when flat is
  // undefined; allocates shard_grad_ and full_ (holding flat, cast, when given), rebinds the
  // parameters into full_ and frees it.
  void BuildBuffers(const at::Tensor& flat, at::Device device, at::ScalarType compute_dtype);

  std::string name_;
  std::vector<FlatParamEntry> entries_;
  int shard_rank_ = 0, shard_count_ = 1;
  int64_t numel_ = 0, shard_numel_ = 0;
  at::Tensor shard_;       // [shard_numel]
  at::Tensor shard_grad_;  // [shard_numel]
  at::Tensor full_;        // [padded_numel]; storage swapped between allocated and empty.
  bool full_allocated_ = false;
  bool mixed_ = false;
  bool offloaded_ = false;
  at::Tensor full_grad_;  // [padded_numel] or undefined.
};

}  // namespace shardline::fsdp

#endif  // SHARDLINE_FSDP_FLAT_PARAM_H_
