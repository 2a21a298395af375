// RankProcess: one supervised trainer process (one rank of a job attempt) started by the worker
// daemon.
//
// The child runs in its own process group (so a stop reaches anything it started), writes stdout
// and stderr into a pipe that its RankLog (rank_log.h) reads into the rotated log files and the
// queue of lines for the coordinator, and gets SIGKILL from the kernel if the daemon dies
// (PR_SET_PDEATHSIG), so a killed daemon leaves no trainer behind. With Options::user it runs as
// that user (the kernel clears the death signal on a change of user, so it is set after).
//
// Thread safety: not thread-safe; the daemon calls each RankProcess only under its own mutex
// (worker_daemon.h), so a pid is never signalled after another thread reaped it.
#ifndef SHARDLINE_WORKER_RANK_PROCESS_H_
#define SHARDLINE_WORKER_RANK_PROCESS_H_

#include <sys/types.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "worker/rank_log.h"
#include "worker/trainer_user.h"

namespace shardline::worker {

class RankProcess {
 public:
  struct Options {
    std::vector<std::string> argv;           // argv[0] is the executable path.
    std::map<std::string, std::string> env;  // Added to (and overriding) the daemon's env.
    std::vector<std::string> drop_env;       // Removed from the daemon's env (secrets).
    std::string log_path;                    // stdout + stderr, created or truncated.
    std::string working_dir;                 // Empty: the daemon's.
    // The log rotates at this size (log_path.1 keeps the previous part): at most twice this on
    // disk per rank.
    int64_t log_max_file_bytes = int64_t{8} << 20;
    // Set: the child switches to this user before execve (--trainer_user, trainer_user.h).
    std::optional<TrainerUser> user;
  };

  // Starts the process. Errors: INVALID_ARGUMENT for an empty argv or an executable that does
  // not exist (naming it); INTERNAL when fork fails; the log file's error when it cannot be opened.
  static absl::StatusOr<std::unique_ptr<RankProcess>> Start(const Options& options);

  // Kills the process group if still running (SIGKILL) and reaps it.
  ~RankProcess();

  pid_t pid() const { return pid_; }
  const std::string& log_path() const { return log_->path(); }
  // The rank's output: its files and its lines waiting for the coordinator.
  RankLog* log() const { return log_.get(); }

  // Reaps the process if it ended. Returns its exit code: the code it exited with, or -SIGNAL when
  // a signal killed it; nullopt while it runs.
  std::optional<int> Poll();

  // Blocks until the process ends or `timeout` passes; returns the exit code or nullopt.
  std::optional<int> WaitFor(absl::Duration timeout);

  // A stop is Terminate, then Kill once the grace period has passed (the daemon's stop thread,
  // worker_daemon.h): neither waits, so no rank's grace period holds up another's.
  // SIGTERM to the process group; returns at once. Nothing once the process was reaped (its pid
  // may belong to another process by then).
  void Terminate();
  // SIGKILL to the process group and the process; returns at once (Poll reaps it). Nothing once
  // the process was reaped.
  void Kill();
  // SIGUSR1 to the process alone (a preemption: the trainer saves and waits for its stop; its
  // children would die of it). The child starts with SIGUSR1 blocked, the trainer unblocks it
  // once its handler is in place. Nothing once the process was reaped.
  void Preempt();

  // The last `max_bytes` of the log (whole lines, both files), for failure reports. After the
  // exit it first waits (up to a second) for the output still in the pipe.
  std::string LogTail(size_t max_bytes = 4096) const;

 private:
  RankProcess(pid_t pid, std::unique_ptr<RankLog> log) : pid_(pid), log_(std::move(log)) {}

  pid_t pid_;
  std::unique_ptr<RankLog> log_;
  std::optional<int> exit_code_;
};

// Human-readable form of an exit code from Poll(): "exited with code 3", "killed by SIGKILL".
std::string DescribeExit(int exit_code);

}  // namespace shardline::worker

#endif  // SHARDLINE_WORKER_RANK_PROCESS_H_
