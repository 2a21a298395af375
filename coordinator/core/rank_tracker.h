// RankTracker: liveness of the ranks of running attempts, as the workers' heartbeats report them.
//
//   acked       a rank its worker has listed in a heartbeat (in any state): the daemon has its
//               START. A new stream re-sends only the STARTs not acked.
//   running     an acked rank that has not exited. Every later heartbeat of its worker must
//               list it; one that does not means the rank is gone (RANK_LOST: e.g. the daemon
//               restarted and its trainers died).
//   stale       a live rank of an attempt that is over (the worker was cut off while it ended):
//               the worker gets a STOP for that attempt, once per stream. A job the core does
//               not know counts as over (a coordinator restarted without its state meets the
//               old jobs' ranks), so a worker could list made-up (job, attempt) pairs without
//               end: at most kMaxStopsPerStream STOPs (and remembered pairs) per stream.
//   start timeout  a rank not acked within the start timeout of its attempt's start
//               (RANK_START_TIMEOUT: its START was lost or never acted on).
//   worker lost a dead worker's attempts fail (WORKER_LOST).
//   generations fault_tolerance REPLICA_GROUPS replaces the ranks of a lost replica group with a
//               new process generation (ReplaceRank); statuses of an older generation are
//               ignored (its exit is expected), and so are those of a stopped rank (StopRanks:
//               the rest of a lost group, whatever its exit code).
//   not shared  a rank exited with the trainer's kExitCheckpointDirNotShared (exit_codes.h):
//               the job's checkpoint.dir is not one directory on every worker it was placed on
//               (CHECKPOINT_DIR_NOT_SHARED, permanent: a restart would meet the same mounts).
//
// The tracker decides; it changes no job. It RETURNS the failures (and STOPs) for the core to
// apply, and the core tells it when an attempt starts and ends (an attempt is tracked exactly
// while its job is RUNNING).
//
// Thread safety: none of its own. CoordinatorCore owns one and calls it only under its mutex.
#ifndef SHARDLINE_COORDINATOR_CORE_RANK_TRACKER_H_
#define SHARDLINE_COORDINATOR_CORE_RANK_TRACKER_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "coordinator/state/state.pb.h"
#include "proto/coordinator.pb.h"

namespace shardline::coordinator {

// An attempt the core must fail: JobStateMachine::FailAttempt(kind, reason, restartable).
struct RankFailure {
  std::string job_id;
  // RANK_FAILED, RANK_LOST, RANK_START_TIMEOUT, WORKER_LOST or CHECKPOINT_DIR_NOT_SHARED.
  std::string kind;
  std::string reason;
  // False when no restart can help: the job fails now, with restarts left.
  bool restartable = true;
  // The ranks that failed (fault_tolerance REPLICA_GROUPS loses their replica groups instead of
  // failing the attempt, see coordinator_core.h).
  std::vector<int32_t> ranks;
};

class RankTracker {
 public:
  // (job id, rank) pairs.
  using RankKeys = std::set<std::pair<std::string, int32_t>>;

  // STOPs one stream of a worker gets for stale ranks. A daemon runs at most a rank per slot, so
  // a real one stays far below; past it the worker's heartbeats are not worth more memory or
  // outbox entries until its next stream.
  static constexpr size_t kMaxStopsPerStream = 256;

  // The job's new attempt is RUNNING (status: job_id, attempt, placement, started_unix_ms); no
  // rank acked yet.
  void StartAttempt(const JobStatus& status);
  // The coordinator restarted with this attempt RUNNING: every rank counts as acked and running
  // (which ranks the daemons had acked was not persisted).
  void RestoreAttempt(const JobStatus& status);
  // The job's attempt ended (success, failure or cancel): its ranks are no longer expected.
  void EndAttempt(const std::string& job_id);

  bool IsRunning(const std::string& job_id, int32_t attempt) const;
  // Whether `rank` of the job's `attempt` was placed on `worker_id` (in any generation), for the
  // running attempt or the job's last ended one: whose log lines the worker may ship. The ended
  // attempt counts because a daemon ships a rank's last lines after the attempt is over (it
  // drains them for a while after the exit); older attempts, and attempts that ended before a
  // coordinator restart, are not remembered.
  bool PlacedOn(const std::string& job_id, int32_t attempt, int32_t rank,
                const std::string& worker_id) const;
  bool IsAcked(const std::string& job_id, int32_t rank) const;
  // Told to stop (StopRanks) and not replaced since.
  bool IsStopped(const std::string& job_id, int32_t rank) const;
  // Whether `worker_id` runs ranks it must keep listing.
  bool HasRunningRanks(const std::string& worker_id) const;

  // What one rank status of `worker_id`'s heartbeat means. Records the acknowledgement.
  struct Observation {
    bool current = false;    // a rank of the running attempt placed on this worker
    bool stop = false;       // a live rank of an attempt that is over: push a STOP of that attempt
    bool exited_ok = false;  // current, EXITED with code 0
    std::optional<RankFailure> failed;  // current, EXITED otherwise: RANK_FAILED
  };
  Observation Observe(const std::string& worker_id, const RankStatus& rs);
  // After a heartbeat of `worker_id` that listed the `reported` current ranks: one RANK_LOST
  // failure per job with a running rank on the worker that the heartbeat left out.
  std::vector<RankFailure> LostRanks(const std::string& worker_id, const RankKeys& reported) const;

  // RANK_START_TIMEOUT for every attempt started more than `limit` before `now` with ranks not
  // yet acked.
  std::vector<RankFailure> StartTimeouts(absl::Time now, absl::Duration limit) const;
  // `worker_id` (on `node`) missed heartbeats for `timeout` and is dead: forgets its running
  // ranks and the STOPs it was sent, and returns WORKER_LOST for every attempt with ranks on it.
  std::vector<RankFailure> WorkerDied(const std::string& worker_id, const std::string& node,
                                      absl::Duration timeout);
  // A collected (finished) job: forgets whatever the tracker still holds of it.
  void ForgetJob(const std::string& job_id);
  // A new stream of `worker_id` (maybe a new daemon): stale ranks get a STOP again.
  void StreamOpened(const std::string& worker_id);
  // The core queued a STOP of (job_id, attempt) for `worker_id` on its current stream (the
  // attempt ended): heartbeats listing its ranks while they stop (the grace period) are not
  // stale and get no second STOP. A new stream forgets it (StreamOpened), since a STOP still
  // queued is not re-sent on it.
  void StopSent(const std::string& worker_id, const std::string& job_id, int32_t attempt);

  // fault_tolerance REPLICA_GROUPS. `ranks` of the job's attempt were told to stop (their group
  // is lost): their exits and absence are expected from now on.
  void StopRanks(const std::string& job_id, const std::vector<int32_t>& ranks);
  // `rank` of the job's attempt runs again as `generation` on `worker_id` (`node`), placed at
  // `now`: not acked, not stopped; its start timeout counts from `now`.
  void ReplaceRank(const std::string& job_id, int32_t rank, const std::string& worker_id,
                   const std::string& node, int32_t generation, absl::Time now);

 private:
  struct Attempt {
    int32_t attempt = 0;
    int64_t started_unix_ms = 0;
    std::vector<std::pair<std::string, std::string>> placement;  // by rank: (worker id, node)
    std::vector<int32_t> generation;                             // by rank
    std::vector<int64_t> placed_unix_ms;                         // by rank
    std::set<int32_t> acked;
    std::set<int32_t> stopped;
    // Every (rank, worker id) of the attempt, replaced generations included: a replaced rank's
    // old worker may still ship its last lines. At most world x workers entries.
    std::set<std::pair<int32_t, std::string>> ever_placed;
  };
  void Track(const JobStatus& status, bool restored);

  std::map<std::string, Attempt> attempts_;  // running attempts by job id
  // By job id: the placement of the job's last ended attempt (one per job, forgotten with it).
  std::map<std::string, std::pair<int32_t, std::set<std::pair<int32_t, std::string>>>> ended_;
  std::map<std::string, RankKeys> running_;  // by worker id
  // By worker id: the (job, attempt) pairs told to STOP on its current stream; at most
  // kMaxStopsPerStream each.
  std::map<std::string, std::set<std::pair<std::string, int32_t>>> stops_sent_;
};

}  // namespace shardline::coordinator

#endif  // SHARDLINE_COORDINATOR_CORE_RANK_TRACKER_H_
