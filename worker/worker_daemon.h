// WorkerDaemon: the node agent. Registers this node's slots with the coordinator, heartbeats,
// takes rank assignments from its stream, starts one trainer process per rank (torchrun-style
// environment plus the coordinator's rendezvous coordinates), supervises them, relays their
// progress, and stops them on request.
//
// Life of an assignment:
//   START  -> write the spec to <work_dir>/jobs/<job>/attempt-<a>/spec-rank-<r>.yaml, start
//             `trainer --spec ... --metrics_out ...` with its launch environment
//             (worker/trainer_env.h, written by launch::WriteRankEnv: RANK, WORLD_SIZE, ..., the
//             attempt credential SHARDLINE_RDZV_SECRET; never the join token), and log
//             to rank-<r>.log there (rotated to rank-<r>.log.1, rank_log.h); report it RUNNING
//             in heartbeats; ship its log lines to the coordinator (ShipLogs) as they come;
//   exit   -> ship its last lines, then report EXITED with the exit code and, on failure, the
//             log's tail;
//   STOP   -> SIGTERM to the process group of every rank of the attempt at once, then SIGKILL
//             (by the stop thread, StopLoop) to each one still running when the grace period
//             has passed. Handling a STOP never waits for a rank, so the stream reads on: a
//             STOP is acted on when it arrives, not after an earlier STOP's grace period. Every
//             rank of a stopped attempt is gone (and reaped) within the grace period plus the
//             stop thread's reap poll (20 ms, worker_daemon_stop.cc) plus scheduling delays of
//             the STOP's arrival.
//   STOP_RANK -> the same for one rank of the attempt, if the generation it runs is at most the
//             assignment's (fault_tolerance REPLICA_GROUPS stops the rest of a lost group).
//   PREEMPT -> SIGUSR1 to every running rank of the attempt (the trainer itself, not its
//             group): they save a checkpoint at their next step and wait for the STOP. Started
//             with SIGUSR1 blocked (rank_process.cc), so one that arrives before the trainer's
//             handler is installed waits instead of killing it.
// Generations (Assignment.generation): a rank's first process is generation 0. A START whose
// generation is above the newest this daemon holds for (job, attempt, rank) starts the rank again
// (a replacement: it joins the running job, SHARDLINE_RANK_GENERATION); an older process of that
// rank still running is stopped first. A START of an equal or older generation is a repeat and
// is ignored. The newer START waits (deferred_starts_) until the older process has ended, without
// holding up the stream; a STOP of the rank drops it. Each generation has its own files
// (rank_files.h); its log lines ship as rank R.
// Heartbeats carry, per (job, attempt, rank), the newest generation's status only: a newer
// generation runs only after every older one here has ended.
// When the coordinator goes away the daemon keeps its trainers running and reconnects with
// exponential backoff (re-registering under the same node name); if the daemon itself dies, the
// kernel kills its trainers (see RankProcess).
//
// Thread safety: Run() blocks the calling thread; Shutdown() may be called from any thread
// (e.g. a signal-watching thread).
#ifndef SHARDLINE_WORKER_WORKER_DAEMON_H_
#define SHARDLINE_WORKER_WORKER_DAEMON_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "client/client_tls.h"
#include "proto/coordinator.pb.h"
#include "spec/path_policy.h"
#include "worker/metrics_tail.h"
#include "worker/progress_relay.h"
#include "worker/rank_process.h"
#include "worker/trainer_env.h"
#include "worker/trainer_user.h"
#include "worker/visible_devices.h"

namespace shardline::worker {

struct WorkerOptions {
  std::string coordinator_address;  // host:port
  std::string join_token;           // sent as "authorization: Bearer <token>" (empty: none)
  // TLS to the coordinator (file paths): the CA, and this node's client certificate for mutual
  // TLS. Trainers get the CA and `insecure` (SHARDLINE_TLS_CA, SHARDLINE_INSECURE), not the key.
  client::ClientTlsFiles tls;
  std::string node_name;          // unique per node
  std::string advertise_address;  // where peers reach this node (collectives bind here)
  int cpu_slots = 0;              // CPU slots offered (used when no GPU is found)
  std::string work_dir;           // per-job directories and rank logs
  std::string trainer_path;       // the trainer binary
  // Empty: trainers run as the daemon's user. Else the unprivileged user they run as
  // (trainer_user.h); the daemon must be root, and checks at Create that this user can run the
  // trainer, reach work_dir and write under the checkpoint roots, and read no credential file.
  std::string trainer_user;
  std::vector<std::string> credential_files;  // --join_token_file, --tls_key (empty: none)
  // Where specs may read and write on this node (checked again at each START, with symbolic
  // links resolved; the coordinator's check is lexical). Empty roots: anywhere.
  spec::PathPolicy path_policy;
  absl::Duration grace_period = absl::Seconds(10);
  // Each rank's log rotates at this size: at most twice this on disk per rank.
  int64_t rank_log_max_file_bytes = int64_t{8} << 20;
  absl::Duration rpc_timeout = absl::Seconds(10);
  // Reconnect backoff doubles from 100 ms up to this; kept well below the coordinator's default
  // heartbeat timeout (10 s) so a restarted coordinator gets its streams back quickly.
  absl::Duration max_backoff = absl::Seconds(2);
};

class WorkerDaemon {
 public:
  // Errors: INVALID_ARGUMENT for a missing coordinator address, node name, work dir, an
  // unrunnable trainer path, no slots, or a trainer user that fails its checks (naming the flag,
  // the path and the fix); the error creating work_dir.
  static absl::StatusOr<std::unique_ptr<WorkerDaemon>> Create(const WorkerOptions& options);
  ~WorkerDaemon();

  // Serves until Shutdown(). Returns OK after a requested shutdown (all ranks stopped).
  absl::Status Run();

  // Asks Run() to stop every rank and return.
  void Shutdown();

 private:
  struct Rank {
    Assignment assignment;
    std::unique_ptr<RankProcess> process;
    std::unique_ptr<MetricsTail> metrics;
    RankStatus status;
    absl::Time exited_at = absl::InfiniteFuture();
    // When the supervisor first saw the exit; EXITED is published once the log is shipped (or
    // kLogDrainWait after this).
    absl::Time exit_seen = absl::InfiniteFuture();
    // Set by a stop (SIGTERM sent): StopLoop sends SIGKILL at this time if it still runs.
    absl::Time kill_at = absl::InfiniteFuture();
    bool killed = false;  // SIGKILL sent
  };
  using RankKey = std::tuple<std::string, int, int, int>;  // job, attempt, rank, generation

  WorkerDaemon(WorkerOptions options, std::unique_ptr<client::CoordinatorClient> client);

  absl::Status Register();
  void HeartbeatLoop();
  void SuperviseLoop();
  // Sends every rank's new log lines in one ShipLogs call; keeps them when the coordinator is
  // unreachable (RankLog drops the oldest past its bound).
  void ShipLogs();
  // Reads the assignment stream until it breaks or shutdown.
  absl::Status ServeAssignments();
  // Never blocks on a rank (it runs on the thread that reads the stream).
  void HandleAssignment(const Assignment& a);
  absl::Status StartRankLocked(const Assignment& a) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // StartRankLocked, or on failure the rank reported EXITED so the attempt fails.
  void StartOrReportLocked(const Assignment& a) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // SIGTERM now to every running process whose key `which` selects, and SIGKILL by StopLoop
  // once `grace` has passed (an earlier, sooner deadline of a rank stays); returns at once.
  // Deferred STARTs that `which` selects are dropped.
  void StopWhereLocked(const std::function<bool(const RankKey&)>& which, absl::Duration grace)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The stop thread (worker_daemon_stop.cc): sends the SIGKILLs that are due, reaps the
  // killed; sleeps until the next deadline. Ends after StopAllAndEndStopLoop.
  void StopLoop();
  // Run's end: stops every rank (StopWhereLocked with the daemon's grace period), waits until
  // all are reaped, then ends StopLoop.
  void StopAllAndEndStopLoop();
  // Whether an older generation than `a`'s of a's rank still runs here.
  bool OlderGenerationRunsLocked(const Assignment& a) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Starts the deferred STARTs whose older generations have ended.
  void StartDeferredLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The newest generation this daemon holds for (job, attempt, rank); nullopt: none.
  std::optional<int> NewestGenerationLocked(const std::string& job_id, int attempt, int rank) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<Slot> DiscoverSlots() const;

  const WorkerOptions options_;
  // CUDA_VISIBLE_DEVICES as inherited at start (worker/visible_devices.h); nullopt: unset.
  std::optional<std::vector<std::string>> visible_devices_;
  // What of this node goes into every trainer's environment (set by Create; among it the
  // interface holding options_.advertise_address, the ranks' NCCL_SOCKET_IFNAME unless the
  // daemon's environment sets one).
  TrainerEnvNode trainer_env_node_;
  std::optional<TrainerUser> trainer_user_;  // set from WorkerOptions::trainer_user at Create
  std::unique_ptr<client::CoordinatorClient> client_;
  std::atomic<bool> shutdown_{false};
  // Set when a rank's exit was published: the heartbeat loop sends at once instead of at its
  // next interval, so a lost rank reaches the coordinator's fault handling (a restart, or a
  // replica group's ABORT vote) without waiting up to a heartbeat interval.
  std::atomic<bool> heartbeat_now_{false};

  absl::Mutex mu_;
  std::string worker_id_ ABSL_GUARDED_BY(mu_);
  // From the latest registration; Heartbeat and StreamAssignments send it.
  std::string worker_credential_ ABSL_GUARDED_BY(mu_);
  bool registered_ ABSL_GUARDED_BY(mu_) = false;  // Has a worker id to heartbeat with.
  absl::Duration heartbeat_interval_ ABSL_GUARDED_BY(mu_) = absl::Seconds(1);
  std::map<RankKey, Rank> ranks_ ABSL_GUARDED_BY(mu_);
  // Replacement STARTs waiting for an older generation of their rank to end.
  std::vector<Assignment> deferred_starts_ ABSL_GUARDED_BY(mu_);
  // Wakes StopLoop (a new SIGKILL deadline, or the end of Run).
  absl::CondVar stop_cv_;
  bool stop_loop_done_ ABSL_GUARDED_BY(mu_) = false;
  // Progress reports on their way to the coordinator (about 1 MiB a rank at most).
  ProgressRelay relay_{4096};
  // The assignment stream runs on a client of its own: cancelling a client's streams is final
  // for that client, and a re-registration must end only the current stream.
  std::shared_ptr<client::CoordinatorClient> stream_client_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shardline::worker

#endif  // SHARDLINE_WORKER_WORKER_DAEMON_H_
