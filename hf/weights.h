// Hugging Face checkpoint folders in and out, in our parameter names and layouts (weight_map.h).
// Torch-free: the trainer turns ReadHfWeights' tensors into its engine's state; export writes
// from a Shardline checkpoint without LibTorch.
//
//   DIR/config.json                       spec/hf_config.h
//   DIR/model.safetensors                 one file, or
//   DIR/model.safetensors.index.json      {"weight_map": {"<tensor>": "<file>"}} and its shards
//
// Every safetensors file is read through checkpoint/safetensors_reader (the hardened header
// parser; tensors read one at a time with pread). Shard names in an index must be plain file
// names inside DIR (no "/"), so an index cannot point the trainer at other files. F32, F16 and
// BF16 tensors are converted to float32. ForEachHfWeight holds one tensor at a time (the
// trainer copies this rank's range of each into its shards); ReadHfWeights holds them all.
//
// Thread safety: pure functions over the file system.
#ifndef SHARDLINE_HF_WEIGHTS_H_
#define SHARDLINE_HF_WEIGHTS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace shardline::hf {

struct HostTensor {
  std::vector<int64_t> shape;
  std::vector<float> values;  // Row-major.
};

// Every parameter of the model that <hf_dir>/config.json describes, by our name, in our layout.
// Errors: NOT_FOUND (missing config.json or safetensors file), INVALID_ARGUMENT naming the file
// and tensor (missing tensor, wrong shape, unsupported dtype, bad index), DATA_LOSS from the
// safetensors reader.
absl::StatusOr<std::map<std::string, HostTensor>> ReadHfWeights(const std::string& hf_dir);

// The same tensors, one at a time: calls visit(our_name, tensor) for each (the tensor lives
// during the call only) and stops at the first error it returns. Every tensor is looked up and
// its shape checked before the first is read. Errors: as ReadHfWeights, and visit's.
absl::Status ForEachHfWeight(
    const std::string& hf_dir,
    const std::function<absl::Status(const std::string& our_name, const HostTensor& t)>& visit);

// Writes <out_dir>/config.json and <out_dir>/model.safetensors (float32, HF names and layouts)
// for the model of `config_json` (a config from HfConfigFromModelSpec), taking each parameter
// from `get(our_name)`. out_dir is created if missing. Files are written atomically.
// Errors: those of `get`; INVALID_ARGUMENT for a shape that does not fit the layout; INTERNAL
// for I/O.
absl::Status WriteHfFolder(
    const std::string& out_dir, const std::string& config_json,
    const std::function<absl::StatusOr<HostTensor>(const std::string& our_name)>& get);

}  // namespace shardline::hf

#endif  // SHARDLINE_HF_WEIGHTS_H_
