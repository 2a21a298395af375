#include "trainer/failure_exits.h"

#include <iostream>

#include "common/logging.h"
#include "launch/exit_codes.h"

namespace shardline::trainer {

int Fail(int code, absl::string_view phase, const absl::Status& status) {
  SL_LOG(ERROR) << phase << ": " << status.message() << " ["
                << absl::StatusCodeToString(status.code()) << "; exit " << code << "]";
  return code;
}

bool IsCommError(const absl::Status& s) {
  return s.code() == absl::StatusCode::kUnavailable ||
         s.code() == absl::StatusCode::kDeadlineExceeded ||
         s.code() == absl::StatusCode::kFailedPrecondition;
}

int FailFlags(const absl::Status& s) {
  if (s.code() == absl::StatusCode::kCancelled) {  // --help
    std::cout << s.message();
    return launch::kExitOk;
  }
  std::cerr << "trainer: " << s.message();
  return launch::kExitBadSpec;
}

// A model too large for this rank's memory (its shards and optimizer state, or the whole model
// with --backend local) is the spec's, like a bad size: a retry would fail the same way.
int FailModel(const absl::Status& s) {
  return Fail(launch::kExitBadSpec,
              s.code() == absl::StatusCode::kResourceExhausted ? "out of memory" : "model", s);
}

// A lost peer while the engine broadcasts the initial parameters is a communication failure;
// running out of memory for the shards is as FailModel; anything else the engine refuses is the
// spec's.
int FailEngine(const absl::Status& s) {
  if (s.code() == absl::StatusCode::kResourceExhausted) return FailModel(s);
  return Fail(IsCommError(s) ? launch::kExitCommFailure : launch::kExitBadSpec, "fsdp", s);
}

// Some rank cannot see the checkpoint directory: not retried (launch/exit_codes.h). A lost peer or
// store is a communication failure; rank 0 unable to write there is a checkpoint (data) error.
int FailCheckpointDir(const absl::Status& s) {
  if (s.code() == absl::StatusCode::kInvalidArgument) {
    return Fail(launch::kExitCheckpointDirNotShared, "checkpoint", s);
  }
  return Fail(IsCommError(s) ? launch::kExitCommFailure : launch::kExitDataError, "checkpoint", s);
}

// A lost peer while loading is a communication failure; a missing, corrupt or mismatched
// checkpoint (FAILED_PRECONDITION among them) is a data error.
int FailRestore(const absl::Status& s) {
  const bool comm = IsCommError(s) && s.code() != absl::StatusCode::kFailedPrecondition;
  return Fail(comm ? launch::kExitCommFailure : launch::kExitDataError, "checkpoint", s);
}

int FailTraining(const absl::Status& s, int stop_signal) {
  if (s.code() == absl::StatusCode::kCancelled) {
    return Fail(launch::kExitSignalBase + stop_signal, "stopped", s);
  }
  if (s.code() == absl::StatusCode::kAborted) return Fail(launch::kExitDiverged, "training", s);
  if (IsCommError(s)) return Fail(launch::kExitCommFailure, "training", s);
  // A bad token id (INVALID_ARGUMENT) or a data file truncated under the run (DATA_LOSS, from
  // data::ReadBatch) is a data error.
  if (s.code() == absl::StatusCode::kInvalidArgument || s.code() == absl::StatusCode::kDataLoss) {
    return Fail(launch::kExitDataError, "data", s);
  }
  return Fail(launch::kExitInternal, "training", s);
}

}  // namespace shardline::trainer
