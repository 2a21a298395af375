// ReadTensorBoardEvents: the events of one TFRecord event file, as TensorBoard reads them, with
// both checksums of every record verified. Tests only: what TensorBoardWriter wrote (its own
// test) and what a training run's leaders wrote (the loop under a gate).
#ifndef SHARDLINE_TRAINER_TENSORBOARD_READER_H_
#define SHARDLINE_TRAINER_TENSORBOARD_READER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "third_party/tensorboard/proto/event.pb.h"

namespace shardline::trainer {

// Errors: NOT_FOUND for a file that cannot be opened; DATA_LOSS naming the file and the offset
// of a truncated record, a checksum that does not match or an event that does not parse.
absl::StatusOr<std::vector<tensorboard::Event>> ReadTensorBoardEvents(const std::string& path);

}  // namespace shardline::trainer

#endif  // SHARDLINE_TRAINER_TENSORBOARD_READER_H_
