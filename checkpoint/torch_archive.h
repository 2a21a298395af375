// One tensor saved by torch.save, read without LibTorch or Python: the item format of PyTorch
// DCP's default FileSystemWriter, which writes every tensor chunk as a torch.save archive at an
// offset inside a __R_N.distcp file (torch/distributed/checkpoint/filesystem.py, _write_item).
//
// A torch.save archive is a zip file whose entries are stored, not compressed
// (caffe2/serialize/inline_container.cc):
//   <prefix>/data.pkl     the pickle of the object: for a tensor,
//                         torch._utils._rebuild_tensor_v2(
//                           persistent_id(("storage", torch.<Type>Storage, "<key>", "cpu", numel)),
//                           storage_offset, size, stride, requires_grad, OrderedDict())
//   <prefix>/data/<key>   the storage's bytes
//   <prefix>/byteorder    "little" (absent in old archives: little)
// Only those are read. Zip64 archives (an entry or offset past 4 GiB) are refused by name.
//
// Errors: DATA_LOSS naming `what` and the entry for a malformed archive; INVALID_ARGUMENT for a
// well-formed archive holding something else (not one tensor, an unknown storage type, a
// big-endian archive). Thread safety: pure functions.
#ifndef SHARDLINE_CHECKPOINT_TORCH_ARCHIVE_H_
#define SHARDLINE_CHECKPOINT_TORCH_ARCHIVE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shardline::checkpoint {

// Element types of the storages read here.
enum class TorchDtype { kFloat32, kFloat64, kFloat16, kBFloat16 };
int TorchDtypeSize(TorchDtype d);
// "torch.float32" / "FloatStorage" style names; false when unknown.
bool TorchDtypeFromName(absl::string_view name, TorchDtype* out);

// A tensor as a strided view of a storage; `storage` points into the archive's bytes.
struct TorchSavedTensor {
  TorchDtype dtype = TorchDtype::kFloat32;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;  // Elements.
  int64_t storage_offset = 0;    // Elements.
  absl::string_view storage;     // The whole storage; every element of the view lies inside.
};

// The entries of a zip archive whose entries are stored: name -> bytes (views of `zip`).
absl::StatusOr<std::vector<std::pair<std::string, absl::string_view>>> ReadStoredZip(
    absl::string_view zip, absl::string_view what);

// The tensor of a torch.save archive, checked: the view lies inside its storage.
absl::StatusOr<TorchSavedTensor> ReadTorchSavedTensor(absl::string_view archive,
                                                      absl::string_view what);

// Element `storage_index` of the storage (not of the view: the caller applies offset and
// strides), as float. The caller keeps it inside the storage.
float TorchElementAsFloat(const TorchSavedTensor& t, int64_t storage_index);

}  // namespace shardline::checkpoint

#endif  // SHARDLINE_CHECKPOINT_TORCH_ARCHIVE_H_
