// shardctl's exit codes (also in --help) and the one mapping from an absl::Status to them.
//
// Thread safety: pure functions.
#ifndef SHARDLINE_CLI_EXIT_CODES_H_
#define SHARDLINE_CLI_EXIT_CODES_H_

#include "absl/status/status.h"

namespace shardline::cli {

enum ExitCode {
  kOk = 0,           // success (for submit --watch and watch: the job SUCCEEDED)
  kJobFailed = 1,    // the watched job FAILED or was CANCELLED
  kUsage = 2,        // unknown command, missing argument
  kBadSpec = 3,      // invalid job spec (the message names the field and value)
  kUnreachable = 4,  // the coordinator is unreachable
  kNotFound = 5,     // job, checkpoint, cluster
  kRefused = 6,      // UNAUTHENTICATED or PERMISSION_DENIED
  kOther = 7         // any other error
};

// INVALID_ARGUMENT -> kBadSpec, UNAVAILABLE and DEADLINE_EXCEEDED -> kUnreachable, NOT_FOUND ->
// kNotFound, UNAUTHENTICATED and PERMISSION_DENIED -> kRefused, any other error -> kOther.
int ExitFor(const absl::Status& s);

}  // namespace shardline::cli

#endif  // SHARDLINE_CLI_EXIT_CODES_H_
