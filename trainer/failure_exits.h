// How the trainer's failures become its exit code (launch/exit_codes.h says what each code
// means to the worker daemon and the coordinator: which are retried) and one log line
// "PHASE: message [CODE; exit N]". One function per phase of trainer_main.cc, each deciding from
// the status code whether the failure is the spec's, the data's, a lost peer's or a bug.
//
// Thread safety: stateless; logging is thread-safe.
#ifndef SHARDLINE_TRAINER_FAILURE_EXITS_H_
#define SHARDLINE_TRAINER_FAILURE_EXITS_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace shardline::trainer {

// Logs "PHASE: message [CODE; exit N]" and returns `code`.
int Fail(int code, absl::string_view phase, const absl::Status& status);
// UNAVAILABLE, DEADLINE_EXCEEDED and FAILED_PRECONDITION: what a lost peer or store looks like.
bool IsCommError(const absl::Status& s);

// Flags: CANCELLED is --help (its text on stdout, exit 0); anything else is a bad spec.
int FailFlags(const absl::Status& s);
// Building the model: out of memory or a bad size, both the spec's.
int FailModel(const absl::Status& s);
// Building the engine: a lost peer, out of memory (as FailModel), or the spec's.
int FailEngine(const absl::Status& s);
// The shared checkpoint directory check: not shared, a lost peer, or unwritable (data).
int FailCheckpointDir(const absl::Status& s);
// Restoring a checkpoint: a lost peer, or a missing, corrupt or mismatched checkpoint (data).
int FailRestore(const absl::Status& s);
// Training: stopped by signal `stop_signal` (CANCELLED), diverged (ABORTED), a lost peer, bad
// data, or internal.
int FailTraining(const absl::Status& s, int stop_signal);

}  // namespace shardline::trainer

#endif  // SHARDLINE_TRAINER_FAILURE_EXITS_H_
