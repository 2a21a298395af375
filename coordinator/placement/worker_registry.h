// WorkerRegistry: the workers the coordinator knows, their liveness and which of their slots are
// reserved by jobs.
//
// A worker registers with a node name; its id is stable across re-registrations of that node
// name. Each registration sets the SHA-256 of the worker's new credential (the core issues it);
// CheckCredential compares a presented credential's digest with it, so one worker cannot speak
// for another. The digest is never part of WorkerInfo (ListWorkers, metrics). A worker whose last
// heartbeat is older than the heartbeat timeout is declared DEAD by ReapDead(); its reservations
// are dropped (the caller fails the jobs that held them). A dead worker comes back only by
// registering again.
//
// The coordinator's own blindness is not the workers' silence: when ReapDead() finds that more
// than `blind_gap` passed since its previous call (the coordinator was stopped, paused or starved
// of CPU, so it could neither tick nor take heartbeats), it declares no one dead in that call and
// gives every ALIVE worker one heartbeat timeout from now to heartbeat again, as after a restart
// (Restore).
//
// Thread safety: every method may be called from any thread (one internal mutex; Heartbeat is a
// hash lookup and a time store, so concurrent heartbeats from many workers stay cheap).
#ifndef SHARDLINE_COORDINATOR_PLACEMENT_WORKER_REGISTRY_H_
#define SHARDLINE_COORDINATOR_PLACEMENT_WORKER_REGISTRY_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "coordinator/placement/planner.h"
#include "proto/coordinator.pb.h"

namespace shardline::coordinator {

class WorkerRegistry {
 public:
  // `clock` must outlive the registry. `blind_gap`: see above (infinite: off).
  WorkerRegistry(const Clock* clock, absl::Duration heartbeat_timeout,
                 absl::Duration blind_gap = absl::InfiniteDuration());

  // Registers `req.node_name` (or re-registers it: address, slots and labels are replaced, the
  // worker is ALIVE again, reservations of a live worker are kept). Returns the worker id.
  // Errors: INVALID_ARGUMENT naming the field (empty node_name, no slots, duplicate slot index).
  // `credential_sha256` replaces the worker's credential digest (empty: none).
  // `presented`, when set, is the worker credential the caller sent: a node that is registered
  // and ALIVE may be registered again only with its current credential (its own daemon
  // re-registering), else PERMISSION_DENIED naming the worker, so a caller holding only the join
  // token cannot take over a live node's id, its assignments and its trainers' attempt
  // credentials. A DEAD (or new) node needs none: a restarted daemon is let in once its old
  // registration misses heartbeats for the timeout. nullopt: the caller vouches for the node
  // (unit tests of the core).
  absl::StatusOr<std::string> Register(const RegisterWorkerRequest& req,
                                       absl::string_view credential_sha256 = "",
                                       std::optional<absl::string_view> presented = std::nullopt);

  // OK when `credential` is the one issued at the worker's latest registration. Errors:
  // NOT_FOUND for an unknown id, PERMISSION_DENIED "worker credential does not match worker
  // <id>" otherwise (also for a worker restored without a stored digest: it must re-register).
  absl::Status CheckCredential(absl::string_view worker_id, absl::string_view credential) const;
  // The stored digest (for persistence); empty when none or unknown.
  std::string CredentialDigest(absl::string_view worker_id) const;

  // Records a heartbeat now. Errors: NOT_FOUND for an unknown id, FAILED_PRECONDITION for a
  // worker already declared dead (it must re-register).
  absl::Status Heartbeat(absl::string_view worker_id);

  // Declares every ALIVE worker silent past the timeout DEAD, drops its reservations and returns
  // the ids of the workers that died in this call. After a gap of more than `blind_gap` since the
  // previous call it declares none and restarts every ALIVE worker's timeout instead; the gap is
  // then in blind_for() until the next call.
  std::vector<std::string> ReapDead();
  absl::Duration blind_for() const;

  bool IsAlive(absl::string_view worker_id) const;

  // Free slots of ALIVE workers with slots of `kind`, one entry per worker with at least one
  // free slot, ordered by node name.
  std::vector<NodeCapacity> FreeCapacity(Slot::Kind kind) const;

  // Reserves `slot_index` on `worker_id` for `holder` (the core uses the attempt's
  // "<job id>/<attempt>", so a new attempt of a job never takes a slot its previous attempt's
  // rank still holds). Errors: NOT_FOUND (worker or slot), FAILED_PRECONDITION when the slot is
  // busy or the worker is dead.
  absl::Status Reserve(absl::string_view worker_id, int32_t slot_index, absl::string_view holder);
  // Reserves the slot of every rank of `plan` for `holder`, all or none. Errors: Reserve's
  // (nothing stays reserved for `holder` then).
  absl::Status ReservePlan(const Plan& plan, absl::string_view holder);
  // Frees every slot reserved by `holder`.
  void ReleaseJob(absl::string_view holder);
  // Frees `slot_index` on `worker_id` if `holder` holds it (no-op otherwise).
  void ReleaseSlot(absl::string_view worker_id, int32_t slot_index, absl::string_view holder);

  std::vector<WorkerInfo> List() const;
  absl::StatusOr<WorkerInfo> Get(absl::string_view worker_id) const;

  // Re-creates a worker from a stored record (after a coordinator restart). A worker stored as
  // ALIVE gets a fresh heartbeat time of now, so it has one timeout to come back.
  void Restore(const WorkerInfo& info);
  // Restores a worker's credential digest (after Restore).
  void RestoreCredential(absl::string_view worker_id, absl::string_view credential_sha256);

  int alive_count() const;

 private:
  struct Worker {
    WorkerInfo info;  // state, slots, labels; busy_slots/last_heartbeat filled on read
    absl::Time last_heartbeat;
    std::map<int32_t, std::string> busy;  // slot index -> job id
    std::string credential_sha256;        // of the latest registration's credential
    // Of the credential the latest registration presented, until the worker's first heartbeat
    // (which carries the new one): a daemon whose registration answer was lost (a half-open
    // connection after a partition) retries with what it presented before and is let in.
    // Empty when none was presented.
    std::string predecessor_sha256;
  };
  WorkerInfo ToInfo(const Worker& w) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Clock* clock_;
  const absl::Duration timeout_;
  const absl::Duration blind_gap_;
  mutable absl::Mutex mu_;
  absl::Time last_reap_ ABSL_GUARDED_BY(mu_);
  absl::Duration blind_for_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, Worker> workers_ ABSL_GUARDED_BY(mu_);          // by id
  absl::flat_hash_map<std::string, std::string> id_by_node_ ABSL_GUARDED_BY(mu_);  // node -> id
  int64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace shardline::coordinator

#endif  // SHARDLINE_COORDINATOR_PLACEMENT_WORKER_REGISTRY_H_
