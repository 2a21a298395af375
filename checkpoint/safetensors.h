// Safetensors files (https://huggingface.co/docs/safetensors): one consolidated model file that
// Python's `safetensors` and PyTorch load by parameter name.
//
//   8 bytes   little-endian u64 N: header length
//   N bytes   JSON {"<name>": {"dtype": "F32", "shape": [..], "data_offsets": [b, e]}, ...,
//                   "__metadata__": {"format": "pt", ...}} padded with spaces to a multiple of 8
//   data      each tensor's row-major little-endian bytes at [b, e) after the header
//
// ExportSafetensors works from a checkpoint directory alone (no processes, no LibTorch), so
// `shardctl export JOB --step N --out F` can call it. Tied parameters are written under every
// name (the alias as a copy), as a PyTorch state_dict names them. Written files are durable
// (temp file, fsync, rename, fsync of the target directory).
//
// Thread safety: pure functions.
#ifndef SHARDLINE_CHECKPOINT_SAFETENSORS_H_
#define SHARDLINE_CHECKPOINT_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "checkpoint/safetensors_reader.h"

namespace shardline::checkpoint {

struct SafetensorsTensor {
  std::string name;
  std::string dtype;  // "F32", "F16", "BF16", ...
  std::vector<int64_t> shape;
  std::string data;  // Row-major little-endian bytes.
};

// Writes the parameters (not the optimizer state) of the committed checkpoint `step` (-1: the
// latest) under `checkpoint_root` to `out_path` (atomically), with metadata step, format and
// model_fingerprint. Every range is checksummed on the way. Errors: as CheckpointReader
// (NOT_FOUND, FAILED_PRECONDITION, DATA_LOSS naming file and tensor); INTERNAL for I/O.
absl::Status ExportSafetensors(const std::string& checkpoint_root, int64_t step,
                               const std::string& out_path);
// The same from one step directory (e.g. the path the coordinator's GetCheckpoint returns).
absl::Status ExportSafetensorsFromStepDir(const std::string& step_dir, const std::string& out_path);

class CheckpointReader;  // checkpoint/checkpoint_reader.h

// One float32 tensor of a file written from a checkpoint: its name in the file, its shape, and
// the checkpoint tensor (parameter or "<param>#<state>") holding all its values, or, with
// `stored` empty, every element `value` (a scalar such as an optimizer's step count).
struct CheckpointExportEntry {
  std::string name;
  std::string stored;
  std::vector<int64_t> shape;
  float value = 0;
};

// Streams `entries` from `reader` into a safetensors file at out_path (atomically), one tensor
// in memory at a time, in the order given, with `metadata` as __metadata__. The reader's files
// should have been verified (VerifyFiles). Errors: as CheckpointReader::ReadElements; INTERNAL
// for I/O.
absl::Status WriteSafetensorsFromCheckpoint(const CheckpointReader& reader,
                                            const std::vector<CheckpointExportEntry>& entries,
                                            const std::map<std::string, std::string>& metadata,
                                            const std::string& out_path);

// Errors: INTERNAL for I/O.
absl::Status WriteSafetensors(const std::string& path,
                              const std::vector<SafetensorsTensor>& tensors,
                              const std::map<std::string, std::string>& metadata);

// Every tensor of a file, by name, through SafetensorsReader (safetensors_reader.h: the header
// is checked, the file is read once, tensor by tensor). Use SafetensorsReader directly to read
// only some tensors. Errors: NOT_FOUND for a missing file; DATA_LOSS naming the file and the
// tensor or field for a malformed header, offsets outside the data section, a size that does
// not match shape and dtype, overlapping tensors, a file that shrinks while being read.
absl::StatusOr<std::vector<SafetensorsTensor>> ReadSafetensors(const std::string& path);

}  // namespace shardline::checkpoint

#endif  // SHARDLINE_CHECKPOINT_SAFETENSORS_H_
