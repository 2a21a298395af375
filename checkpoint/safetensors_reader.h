// SafetensorsReader: reads a .safetensors file (layout in safetensors.h) that may come from
// anywhere (checkpoint.init_from_safetensors, shardctl), so nothing in its header is trusted.
//
//   ASSIGN_OR_RETURN(auto reader, SafetensorsReader::Open(path));   // header checked
//   for (const SafetensorsEntry& t : reader->tensors()) { ... }
//   RETURN_IF_ERROR(reader->Read(t, buffer));                        // t.bytes() bytes
//
// Open reads and checks only the header: its length against the file, the JSON, every tensor's
// dtype (known), shape (non-negative integers, at most kMaxDims of them), element count and
// byte size (checked arithmetic), data_offsets (non-negative integers, begin <= end, inside
// the data section, end - begin == numel x dtype size) and that no two tensors' bytes overlap;
// "__metadata__" must map strings to strings. Read copies one tensor's bytes with pread(2), so
// a caller holds at most what it asked for (never the whole file), and a file that shrinks
// after Open gives DATA_LOSS rather than a fault.
//
// Errors: NOT_FOUND for a missing file; DATA_LOSS naming the file and the tensor or field for
// anything malformed; INTERNAL for other I/O errors. Nothing throws.
// Thread safety: immutable after Open; Read may run concurrently (pread).
#ifndef SHARDLINE_CHECKPOINT_SAFETENSORS_READER_H_
#define SHARDLINE_CHECKPOINT_SAFETENSORS_READER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shardline::checkpoint {

// Bytes per element of a safetensors dtype name; 0 when unknown.
int SafetensorsDtypeSize(absl::string_view dtype);

// One tensor of a checked header.
struct SafetensorsEntry {
  std::string name;
  std::string dtype;  // "F32", "F16", "BF16", ... (SafetensorsDtypeSize > 0).
  std::vector<int64_t> shape;
  int64_t numel = 0;
  int64_t begin = 0;  // Byte range [begin, end) within the data section.
  int64_t end = 0;
  int64_t bytes() const { return end - begin; }
};

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> tensors;  // By name.
  std::map<std::string, std::string> metadata;
};

// Header limits: as the reference implementation's (100 MB of JSON); dimensions as LibTorch's
// practical limit; offsets and dimensions as the doubles JSON numbers are (2^53).
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;
inline constexpr int kMaxSafetensorsDims = 64;
inline constexpr int64_t kMaxSafetensorsInteger = int64_t{1} << 53;

// Checks the JSON header of a file whose data section holds `data_bytes` bytes. `path` is only
// used in messages. Errors: DATA_LOSS as above.
absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(absl::string_view json, int64_t data_bytes,
                                                         const std::string& path);

class SafetensorsReader {
 public:
  static absl::StatusOr<std::unique_ptr<SafetensorsReader>> Open(const std::string& path);
  ~SafetensorsReader();
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<SafetensorsEntry>& tensors() const { return header_.tensors; }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  // The entry named `name`, or nullptr.
  const SafetensorsEntry* Find(const std::string& name) const;
  // Copies t's bytes (t.bytes() of them) into dst. t must be one of tensors().
  absl::Status Read(const SafetensorsEntry& t, void* dst) const;
  // Copies elements [first, first + count) of t's row-major flattened elements (count x the
  // dtype's size bytes) into dst: a rank reads only the range its shard holds. Errors: as Read;
  // INVALID_ARGUMENT when the range is not inside [0, t.numel).
  absl::Status ReadElements(const SafetensorsEntry& t, int64_t first, int64_t count,
                            void* dst) const;

 private:
  SafetensorsReader(std::string path, int fd, int64_t data_start, SafetensorsHeader header);
  // Bytes [offset, offset + n) of t's bytes into dst.
  absl::Status ReadBytes(const SafetensorsEntry& t, int64_t offset, int64_t n, void* dst) const;

  std::string path_;
  int fd_;
  int64_t data_start_;  // File offset of the data section.
  SafetensorsHeader header_;
};

}  // namespace shardline::checkpoint

#endif  // SHARDLINE_CHECKPOINT_SAFETENSORS_READER_H_
