// TensorBoardWriter: scalars as TensorBoard event files (`train.tensorboard_dir`), written by
// rank 0 after every logged step: loss, val_loss (steps that evaluated), lr, grad_norm and
// tokens_per_s, tagged with those names (the keys of the metrics JSON lines).
//
// File: <dir>/events.out.tfevents.<unix seconds>.<host>.<pid>.shardline, a TFRecord stream:
// each record is the little-endian uint64 length of the data, the masked CRC32C of those 8
// bytes, the data, the masked CRC32C of the data (mask: rotate right by 15, add 0xa282ead8);
// the data is a serialized tensorboard.Event (third_party/tensorboard: the upstream protos,
// trimmed). The first event carries file_version "brain.Event:2". Every event is flushed, so
// TensorBoard shows a running job.
//
// Torch-free, and its header includes no generated proto header (LibTorch's bundled protobuf
// headers would shadow Debian's in the trainer's LibTorch targets; see trainer/BUILD).
//
// Thread safety: not thread-safe (the training thread writes).
#ifndef SHARDLINE_TRAINER_TENSORBOARD_WRITER_H_
#define SHARDLINE_TRAINER_TENSORBOARD_WRITER_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shardline::trainer {

class TensorBoardWriter {
 public:
  // Creates `dir` (and its parents) and a new event file there. Errors: INTERNAL naming the
  // path.
  static absl::StatusOr<std::unique_ptr<TensorBoardWriter>> Open(const std::string& dir);
  ~TensorBoardWriter();

  // One event at `step` with a simple_value per (tag, value). Errors: INTERNAL naming the file
  // (a full disk).
  absl::Status WriteScalars(int64_t step, double wall_time_s,
                            const std::vector<std::pair<std::string, double>>& scalars);

  const std::string& path() const { return path_; }

 private:
  TensorBoardWriter(std::string path, std::FILE* file) : path_(std::move(path)), file_(file) {}
  absl::Status WriteRecord(const std::string& data);

  std::string path_;
  std::FILE* file_;
};

// The TFRecord framing of `data` (see above).
std::string TfRecord(absl::string_view data);
// CRC32C masked as TFRecord does.
uint32_t MaskedCrc32c(absl::string_view data);

}  // namespace shardline::trainer

#endif  // SHARDLINE_TRAINER_TENSORBOARD_WRITER_H_
