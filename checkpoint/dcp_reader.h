// DcpReader: a checkpoint directory written by torch.distributed.checkpoint.save (PyTorch DCP)
// with its default FileSystemWriter, as FSDP2, torchtitan and torch's own examples write it:
//
//   DIR/.metadata        a pickle of torch.distributed.checkpoint.metadata.Metadata:
//                        state_dict_metadata {fqn: TensorStorageMetadata(properties(dtype, ...),
//                        size, chunks [ChunkStorageMetadata(offsets, sizes)]) or
//                        BytesStorageMetadata()} and storage_data {MetadataIndex(fqn, offset,
//                        index): _StorageInfo(relative_path, offset, length)}
//   DIR/__<R>_<N>.distcp each chunk as a torch.save archive (torch_archive.h) at its offset
//
//   ASSIGN_OR_RETURN(DcpReader r, DcpReader::Open(dir));
//   for (const auto& [fqn, t] : r.tensors()) ...;                 // shape and dtype
//   ASSIGN_OR_RETURN(std::vector<float> v, r.ReadFloat32(fqn));   // every chunk, assembled
//
// The files may come from anyone (a path in a job's spec), so nothing in them is trusted: the
// pickle is read as data (pickle.h: no code runs), a chunk's file must be a plain name inside
// DIR (no "/" or ".."), its byte range inside that file, its archive well formed, its tensor of
// the chunk's sizes and dtype, and the chunks must cover the tensor exactly once. Byte entries
// (BytesStorageMetadata: pickled Python objects such as param_groups' learning rates and
// torchtitan's train_state) are listed by name and never read. Items with storage transforms
// (transform_descriptors, e.g. compression) are refused by name. Limits: .metadata at most
// kMaxMetadataBytes; a tensor (or the range of it asked for) is held in memory one at a time.
//
// Errors: NOT_FOUND for a missing DIR/.metadata or data file; DATA_LOSS naming the file, the
// fqn and what is wrong; INVALID_ARGUMENT for a well-formed checkpoint that holds what this
// reader does not read (an unknown dtype, a transform). Torch-free. Thread safety: immutable
// after Open; ReadFloat32 may run concurrently.
#ifndef SHARDLINE_CHECKPOINT_DCP_READER_H_
#define SHARDLINE_CHECKPOINT_DCP_READER_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "checkpoint/torch_archive.h"

namespace shardline::checkpoint {

inline constexpr char kDcpMetadataFile[] = ".metadata";
inline constexpr int64_t kMaxMetadataBytes = int64_t{256} << 20;

// One chunk of a tensor and where its bytes are.
struct DcpChunk {
  std::vector<int64_t> offsets;  // In the tensor, per dimension.
  std::vector<int64_t> sizes;
  std::string file;    // Relative to the directory: a plain file name.
  int64_t offset = 0;  // Of its torch.save archive in the file.
  int64_t length = 0;
};

struct DcpTensor {
  TorchDtype dtype = TorchDtype::kFloat32;
  std::vector<int64_t> shape;
  std::vector<DcpChunk> chunks;
  int64_t numel() const;
};

class DcpReader {
 public:
  // Reads and checks DIR/.metadata (the data files are opened by ReadFloat32).
  static absl::StatusOr<DcpReader> Open(const std::string& dir);
  // True when DIR holds a .metadata file (cheap: one stat).
  static bool LooksLikeDcp(const std::string& dir);

  const std::string& dir() const { return dir_; }
  const std::map<std::string, DcpTensor>& tensors() const { return tensors_; }
  // The fqns of byte (non-tensor) entries, never read.
  const std::vector<std::string>& byte_entries() const { return byte_entries_; }

  // The whole tensor `fqn` in row-major order, widened to float32. Errors: NOT_FOUND for an
  // unknown fqn; as above.
  absl::StatusOr<std::vector<float>> ReadFloat32(const std::string& fqn) const;
  // Elements [start, end) of the row-major flattening only: the chunks that hold none of them
  // are not read (a rank loading its shard reads the chunks its range overlaps). Errors: as
  // ReadFloat32; INVALID_ARGUMENT for a range outside the tensor.
  absl::StatusOr<std::vector<float>> ReadFloat32Range(const std::string& fqn, int64_t start,
                                                      int64_t end) const;

 private:
  std::string dir_;
  std::map<std::string, DcpTensor> tensors_;
  std::vector<std::string> byte_entries_;
};

// Parses the bytes of a .metadata file (`what` names it in errors). Exposed for the fuzzer.
absl::StatusOr<std::map<std::string, DcpTensor>> ParseDcpMetadata(
    const std::string& bytes, const std::string& what, std::vector<std::string>* byte_entries);

}  // namespace shardline::checkpoint

#endif  // SHARDLINE_CHECKPOINT_DCP_READER_H_
