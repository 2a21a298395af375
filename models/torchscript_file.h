// Loading a TorchScript module file for sharded initialization: the module with storage-less
// parameters (fsdp/param_init.h) and a ParamInitializer that reads any range of a parameter
// straight from the file, so that a rank reads, and holds, only what its shards keep.
//
// A TorchScript file is a zip of stored (uncompressed) records: code/, data.pkl (the module
// object graph, pickled) and data/<key> (one record per tensor storage). torch::jit::load reads
// every storage whole. Here:
//
//   1. torch::jit::load(path, meta)      the classes and methods compiled; no tensor data read
//   2. data.pkl unpickled again, with every data/<key> storage pre-made without memory (the
//      unpickler's storage context), into objects of the classes of step 1
//   3. storages of tensors that are not parameters (buffers, other attributes) read whole
//   4. each parameter: its record's offset in the file, storage offset, sizes and strides;
//      InitialValue::Read preads only the requested elements
//
// Files this cannot split are loaded whole (torch::jit::load on the CPU) and the result says why:
// tensor constants in the code, a class with __setstate__ (it may read the tensors it is given),
// a parameter sharing storage with a non-parameter tensor, a compressed record, big-endian data.
//
// Thread safety: ScriptFileInit::ForEach is const and may run on several threads (pread).
#ifndef SHARDLINE_MODELS_TORCHSCRIPT_FILE_H_
#define SHARDLINE_MODELS_TORCHSCRIPT_FILE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/csrc/jit/api/module.h>

#include "absl/status/statusor.h"
#include "fsdp/param_init.h"

namespace shardline::models {

// Where one parameter's values lie in the file.
struct ScriptFileParam {
  std::string name;  // First name in named_parameters() (a tied tensor is listed once).
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;  // In elements, of the storage.
  int64_t storage_offset = 0;    // In elements.
  int64_t file_offset = 0;       // Byte offset of the storage's record in the file.
  int64_t record_bytes = 0;      // The record's size (bounds every read).
};

// Produces the parameters' values from the file, one parameter at a time, reading only the
// ranges asked for. Reads are float32 (TorchScriptModel refuses other parameter dtypes).
class ScriptFileInit : public fsdp::ParamInitializer {
 public:
  ScriptFileInit(std::string path, std::vector<ScriptFileParam> params);
  absl::Status ForEach(const Visitor& visit) const override;
  const std::vector<ScriptFileParam>& params() const { return params_; }

 private:
  std::string path_;
  std::vector<ScriptFileParam> params_;
};

struct LoadedScript {
  torch::jit::Module module;
  // Non-null when the parameters are storage-less and their values come from here; null when
  // the file was loaded whole (`whole_reason` says why).
  std::unique_ptr<ScriptFileInit> init;
  std::string whole_reason;
};

// Loads `path` with storage-less parameters where it can (see the file comment), whole otherwise.
// Errors: INVALID_ARGUMENT naming the file when it is not a readable TorchScript module.
absl::StatusOr<LoadedScript> LoadScriptForShardedInit(const std::string& path);

}  // namespace shardline::models

#endif  // SHARDLINE_MODELS_TORCHSCRIPT_FILE_H_
