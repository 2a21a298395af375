// Engine state access and memory statistics over the FSDP engine's flat parameters: what
// FsdpEngine's LocalParamState / FullParamState / LoadFullParamState / aliases / memory_stats
// return (checkpoints and logs use them through the engine; docs/fsdp_step.md "State access").
// Free functions over the units' FlatParams, so the engine's schedule stays in fsdp_engine.cc.
//
// Thread safety: the training thread, between steps.
#ifndef SHARDLINE_FSDP_ENGINE_STATE_H_
#define SHARDLINE_FSDP_ENGINE_STATE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fsdp/communicator.h"
#include "fsdp/flat_param.h"
#include "fsdp/param_init.h"

namespace shardline::fsdp {

// Bytes this rank holds, by kind. Persistent state = param_shard + grad_shard (+ optimizer).
struct MemoryStats {
  int64_t param_shard_bytes = 0;     // fp32 master shards (padding included).
  int64_t grad_shard_bytes = 0;      // Reduced gradient shards (padding included).
  int64_t padding_bytes = 0;         // Padding elements in this rank's shards, x4 bytes.
  int64_t gathered_param_bytes = 0;  // Full parameter buffers held now (S > 1 only).
  int64_t peak_gathered_param_bytes = 0;
  int64_t unsharded_grad_bytes = 0;  // Full flat gradients held now.
  int64_t peak_unsharded_grad_bytes = 0;
  int64_t num_params = 0;  // P: unique parameter elements of the model.
  // Where the persistent shards (param_shard_bytes + grad_shard_bytes) live: on the compute
  // device, or in host memory with cpu_offload (then device_shard_bytes is 0). On a CPU job the
  // compute device is the CPU.
  int64_t device_shard_bytes = 0;
  int64_t host_offloaded_shard_bytes = 0;
};

// One original tensor's piece held by this rank.
struct ShardSlice {
  std::string name;
  std::vector<int64_t> global_shape;
  int64_t start = 0, end = 0;  // [start, end) in the tensor's flattened (row-major) elements.
  at::Tensor local;            // 1-D, end - start elements; a VIEW of the rank's state: copy_()
                               // into it to load a checkpoint.
};

using FlatParams = std::vector<std::unique_ptr<FlatParam>>;

// Peaks of gathered parameter bytes and unsharded gradient bytes over the engine's life.
class MemoryPeaks {
 public:
  // Takes the current totals of `flats` into the peaks.
  void Update(const FlatParams& flats);
  int64_t gathered_param_bytes() const { return gathered_; }
  int64_t unsharded_grad_bytes() const { return unsharded_grad_; }

 private:
  int64_t gathered_ = 0;
  int64_t unsharded_grad_ = 0;
};

// The bytes `flats` hold now, with `peaks`.
MemoryStats ComputeMemoryStats(const FlatParams& flats, const MemoryPeaks& peaks);

// This rank's slice of every parameter, in unit order, as views of the shards.
std::vector<ShardSlice> LocalShardSlices(const FlatParams& flats);

// Every parameter gathered to its full shape over `shard` (a collective: every rank of the shard
// group calls it), gathered on `device` one unit at a time (host tensors come back for offloaded
// units). With keep == false the gathers run but nothing is returned.
// Errors: the all-gather's status.
absl::StatusOr<std::vector<std::pair<std::string, at::Tensor>>> GatherFullParams(
    const FlatParams& flats, Communicator* shard, at::Device device, bool keep);

// Copies this rank's part of each full tensor in `state` (by canonical name or alias) into the
// shards. Errors: INVALID_ARGUMENT naming a missing parameter or a shape mismatch.
absl::Status LoadFullParams(const FlatParams& flats,
                            const std::map<std::string, at::Tensor>& state);

// Sharded initialization: walks `init` (every parameter's full initial value, one at a time,
// in the model's order) and copies this rank's range of each into the shards. A tied parameter
// takes the value of the last name visited, as when the values are written to the module.
// Errors: INVALID_ARGUMENT for a name the model lacks or a shape mismatch; INTERNAL naming a
// parameter the initializer never produced; RESOURCE_EXHAUSTED when memory runs out.
absl::Status InitShards(const FlatParams& flats, const ParamInitializer& init);

// Alias name -> canonical name, for tied parameters.
std::map<std::string, std::string> AliasesOf(const FlatParams& flats);

}  // namespace shardline::fsdp

#endif  // SHARDLINE_FSDP_ENGINE_STATE_H_
