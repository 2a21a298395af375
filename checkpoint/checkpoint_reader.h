// CheckpointReader: opens one committed checkpoint and reads tensor elements from its data
// files, checking the CRC32C of every range it touches.
//
//   ASSIGN_OR_RETURN(auto reader, CheckpointReader::Open(root, /*step=*/-1));  // latest
//   RETURN_IF_ERROR(reader->VerifyFiles());          // every file present, full size
//   RETURN_IF_ERROR(reader->ReadElements("wte.weight", 0, 100, buf));
//
// Open() checks the manifest: known format_version, every tensor float32 and covered exactly by
// ranges that lie inside listed files. Errors name the file and the tensor:
//   NOT_FOUND            no committed checkpoint; a data file missing (ReadElements/VerifyFiles)
//   FAILED_PRECONDITION  unknown format_version
//   DATA_LOSS            unparsable manifest, inconsistent ranges, a truncated file (also one
//                        truncated after Open or after it was mapped), a checksum mismatch
// Torch-free. Thread safety: const methods may run concurrently.
#ifndef SHARDLINE_CHECKPOINT_CHECKPOINT_READER_H_
#define SHARDLINE_CHECKPOINT_CHECKPOINT_READER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "checkpoint/format.h"

namespace shardline {
class CheckpointManifest;
}

namespace shardline::checkpoint {

class CheckpointReader {
 public:
  // step -1: the newest committed checkpoint under root; otherwise that step.
  static absl::StatusOr<std::unique_ptr<CheckpointReader>> Open(const std::string& root,
                                                                int64_t step);
  // A step directory itself.
  static absl::StatusOr<std::unique_ptr<CheckpointReader>> OpenDir(const std::string& step_dir);
  ~CheckpointReader();

  const std::string& dir() const { return dir_; }
  const CheckpointMeta& meta() const { return meta_; }
  const CheckpointManifest& manifest() const { return *manifest_; }
  // Index into meta().tensors, or -1.
  int FindTensor(const std::string& name) const;

  // Every listed data file exists with its recorded size (cheap: stat only).
  absl::Status VerifyFiles() const;
  // Reads every range and checks its checksum.
  absl::Status VerifyAll() const;
  // Copies elements [start, end) of tensor `name` (float32) into out. Each range touched is
  // read whole and checked. Errors: NOT_FOUND for an unknown tensor; as above.
  absl::Status ReadElements(const std::string& name, int64_t start, int64_t end, float* out) const;

  // Where elements [start, start + count) of a tensor lie in a mapped data file: elements
  // [offset, offset + count) of the caller's [start, end) window are src[0, count).
  struct MappedPiece {
    int64_t offset = 0;
    int64_t count = 0;
    const float* src = nullptr;
    int tensor = -1;  // Index into manifest().tensors() and into its ranges (for messages).
    int range = -1;
  };
  // Like ReadElements, without copying: maps the data files read-only (the page cache itself,
  // so a load reads each byte once for the checksum and once for the copy into the model, and
  // allocates nothing), checks the checksum of every range overlapping [start, end) (each range
  // once per reader), and returns the pieces. The pointers stay valid while the reader lives.
  // A data file whose size differs from the manifest is refused before it is mapped; one that is
  // truncated after it was mapped gives DATA_LOSS naming the file and tensor, not a SIGBUS (the
  // checksum pass reads under GuardMappedRead, mapped_read_guard.h).
  absl::StatusOr<std::vector<MappedPiece>> MapElements(const std::string& name, int64_t start,
                                                       int64_t end) const;
  // Copies a piece's count floats into dst (plain memory, not a mapping). Read the pieces only
  // through this: a data file truncated since MapElements gives DATA_LOSS naming the file and
  // the tensor instead of killing the process with SIGBUS.
  absl::Status CopyMapped(const MappedPiece& piece, float* dst) const;

 private:
  CheckpointReader() = default;
  // Reads range `range` of tensor `tensor` whole into dst (numel * 4 bytes) and checks it.
  absl::Status ReadRange(int tensor, int range, char* dst) const;

  // DATA_LOSS for range `range` of tensor `tensor` whose mapped bytes faulted.
  absl::Status TruncatedWhileMapped(int tensor, int range) const;
  // The mapping of one data file (created on first use).
  absl::StatusOr<const char*> MapFile(const std::string& file, const std::string& tensor) const;

  std::string dir_;
  std::unique_ptr<CheckpointManifest> manifest_;
  CheckpointMeta meta_;

  mutable absl::Mutex mu_;
  // File name -> (address, bytes) of its read-only mapping; unmapped by the destructor.
  mutable std::map<std::string, std::pair<const char*, size_t>> maps_ ABSL_GUARDED_BY(mu_);
  // (tensor, range) whose checksum MapElements has checked and found good.
  mutable std::map<std::pair<int, int>, bool> checked_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shardline::checkpoint

#endif  // SHARDLINE_CHECKPOINT_CHECKPOINT_READER_H_
