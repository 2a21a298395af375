// LocalCluster: `shardctl cluster up|down` — a coordinator and worker daemons on this machine as
// background processes, with everything under one state directory:
//
//   <state_dir>/cluster.json       addresses (API, dashboard, metrics), user token, pids (read by
//   `cluster down` and by
//                                  every other shardctl command when no address is given);
//                                  mode 0600
//   <state_dir>/coordinator/       the coordinator's --state_dir and log, and user.token
//   <state_dir>/worker.token       the worker join token (distinct from the user token)
//   <state_dir>/worker-<i>/        each worker's --work_dir (rank logs) and log
//
// Each start makes two random tokens (common/secret_file.h); the files holding them are created
// with mode 0600, and the processes read them from files (--token_file, --worker_token_file,
// --join_token_file), so no token appears in a process list.
//
// The processes are detached (own session), so they outlive shardctl; `cluster down` sends
// SIGTERM and, after a grace period, SIGKILL.
//
// Thread safety: not thread-safe; one call per shardctl invocation.
#ifndef SHARDLINE_CLI_LOCAL_CLUSTER_H_
#define SHARDLINE_CLI_LOCAL_CLUSTER_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace shardline::cli {

struct ClusterInfo {
  std::string state_dir;
  std::string coordinator_address;  // host:port
  std::string dashboard_address;    // host:port of the web dashboard (loopback, any free port)
  std::string metrics_address;      // host:port of the Prometheus /metrics (loopback, any port)
  std::string token;                // bearer token for users (empty: none)
  pid_t coordinator_pid = 0;
  std::vector<pid_t> worker_pids;
};

struct ClusterOptions {
  std::string state_dir;
  int workers = 2;
  int slots_per_worker = 2;
  std::string coordinator_bin;  // Paths of the binaries (see FindSiblingBinary).
  std::string worker_bin;
  std::string trainer_bin;
  absl::Duration start_timeout = absl::Seconds(30);
};

// Starts the cluster and waits until the coordinator listens and every worker registered (the
// caller checks registration through the coordinator; this waits for the address).
// Errors: FAILED_PRECONDITION when <state_dir>/cluster.json names live processes already;
// DEADLINE_EXCEEDED (with the log's tail) when the coordinator does not come up.
absl::StatusOr<ClusterInfo> StartLocalCluster(const ClusterOptions& options);

// Stops the processes named in <state_dir>/cluster.json and removes that file.
// Errors: NOT_FOUND when there is no cluster.json.
absl::Status StopLocalCluster(const std::string& state_dir, absl::Duration grace);

// Reads <state_dir>/cluster.json. Errors: NOT_FOUND naming the file; PERMISSION_DENIED when
// group or other users may read it (CheckOwnerOnlyFile: the message says how to fix it).
absl::StatusOr<ClusterInfo> ReadClusterInfo(const std::string& state_dir);

// Finds a Shardline binary: beside this executable in Bazel's bazel-bin layout
// (../<package>/<name>), then in the same directory, then on PATH.
// Errors: NOT_FOUND naming every place looked.
absl::StatusOr<std::string> FindSiblingBinary(const std::string& package, const std::string& name);

// Starts argv detached (new session, stdin /dev/null, stdout+stderr to log_path).
absl::StatusOr<pid_t> SpawnDetached(const std::vector<std::string>& argv,
                                    const std::string& log_path);

}  // namespace shardline::cli

#endif  // SHARDLINE_CLI_LOCAL_CLUSTER_H_
