// CoordinatorProcess: runs the real coordinator binary as a child process for tests, waits for
// its "listening on HOST:PORT" line, and can signal (e.g. SIGKILL) and reap it.
//
// Thread safety: one owner thread.
#ifndef SHARDLINE_COORDINATOR_TESTING_COORDINATOR_PROCESS_H_
#define SHARDLINE_COORDINATOR_TESTING_COORDINATOR_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace shardline::coordinator {

class CoordinatorProcess {
 public:
  struct Options {
    std::string binary;             // path of the coordinator binary
    std::vector<std::string> args;  // flags
    std::string stderr_path;        // empty: inherit the test's stderr
    absl::Duration start_timeout = absl::Seconds(30);
  };
  // Starts the binary and waits for its address line. Errors: UNAVAILABLE when it exits first
  // (the message has its exit status and, with stderr_path, the last of its stderr) or
  // DEADLINE_EXCEEDED after start_timeout (the child is killed).
  static absl::StatusOr<std::unique_ptr<CoordinatorProcess>> Start(const Options& options);
  // Kills (SIGKILL) and reaps the child if it still runs.
  ~CoordinatorProcess();

  const std::string& address() const { return address_; }
  // From a "metrics on HOST:PORT" line before the address line; empty when none.
  const std::string& metrics_address() const { return metrics_address_; }
  pid_t pid() const { return pid_; }

  // Sends `sig` and waits up to `timeout` for the exit; returns the wait status.
  absl::StatusOr<int> Signal(int sig, absl::Duration timeout = absl::Seconds(20));

 private:
  CoordinatorProcess() = default;
  pid_t pid_ = -1;
  int stdout_fd_ = -1;
  std::string address_;
  std::string metrics_address_;
};

// The default location of the binary in a test's runfiles.
std::string CoordinatorBinaryPath();

}  // namespace shardline::coordinator

#endif  // SHARDLINE_COORDINATOR_TESTING_COORDINATOR_PROCESS_H_
