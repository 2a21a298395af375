// StateStore: the coordinator's durable state in one SQLite database (WAL mode) under a state
// directory: jobs (with their events), checkpoint records, workers, the jobs' training series
// (training_metrics.h) and the SHA-256 of each worker's credential (a table of its own, so a
// database from before worker credentials still loads: its workers have no credential and must
// register again), each row one serialized
// record keyed by its id, and the running attempts' rendezvous values (namespace, key, value rows,
// so a restarted coordinator serves an attempt still bootstrapping its communicators). Every Put is
// one transaction, so a coordinator killed with SIGKILL loses at most the write in flight; on open,
// SQLite replays the WAL.
//
// synchronous=FULL: every commit syncs the WAL before it returns, so a transition the
// coordinator answered for survives an OS crash or power loss too (NORMAL, used before, could
// drop the newest commits then). The fsync runs on StateWriter's thread, not under the core's
// mutex.
//
// Thread safety: every method may be called from any thread (one internal mutex around the
// connection).
#ifndef SHARDLINE_COORDINATOR_STATE_STATE_STORE_H_
#define SHARDLINE_COORDINATOR_STATE_STATE_STORE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/state/state.pb.h"
#include "proto/coordinator.pb.h"

struct sqlite3;

namespace shardline::coordinator {

// One rendezvous write: a value put, or (delete_namespace) the removal of every row of `ns`.
struct RendezvousWrite {
  bool delete_namespace = false;
  std::string ns;
  std::string key;
  std::string value;
};

// A stored rendezvous value.
struct RendezvousRow {
  std::string ns;
  std::string key;
  std::string value;
};

class StateStore {
 public:
  // Opens (creating if needed) `<state_dir>/coordinator.db`; creates state_dir if missing.
  // Errors: UNAVAILABLE when the directory or database cannot be opened, DATA_LOSS when the
  // schema cannot be created.
  static absl::StatusOr<std::unique_ptr<StateStore>> Open(const std::string& state_dir);
  ~StateStore();

  absl::Status PutJob(const JobRecord& job);
  absl::Status PutCheckpoint(const CheckpointRecord& checkpoint);
  absl::Status DeleteCheckpoint(absl::string_view job_id, int64_t step);
  // Deletes the job's record, its checkpoint records and its training series (finished-job
  // retention).
  absl::Status DeleteJob(absl::string_view job_id);
  absl::Status PutWorker(const WorkerInfo& worker);
  absl::Status PutJobMetrics(const JobMetricsRecord& metrics);
  absl::Status PutWorkerCredential(const WorkerCredentialRecord& record);
  // Applies `writes` in order in one transaction (one sync for a batch of rendezvous Sets);
  // applying them again after a failure gives the same rows.
  absl::Status ApplyRendezvous(const std::vector<RendezvousWrite>& writes);

  // Everything stored. Errors: DATA_LOSS for a row that does not parse.
  absl::StatusOr<std::vector<JobRecord>> LoadJobs();
  absl::StatusOr<std::vector<CheckpointRecord>> LoadCheckpoints();
  absl::StatusOr<std::vector<WorkerInfo>> LoadWorkers();
  absl::StatusOr<std::vector<JobMetricsRecord>> LoadJobMetrics();
  absl::StatusOr<std::vector<WorkerCredentialRecord>> LoadWorkerCredentials();
  // Ordered by namespace, then key.
  absl::StatusOr<std::vector<RendezvousRow>> LoadRendezvous();

 private:
  explicit StateStore(sqlite3* db) : db_(db) {}
  absl::Status Exec(const char* sql) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Upsert(const char* sql, absl::string_view k1, int64_t k2, const std::string& blob);
  absl::StatusOr<std::vector<std::string>> LoadBlobs(const char* sql);

  absl::Mutex mu_;
  sqlite3* db_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shardline::coordinator

#endif  // SHARDLINE_COORDINATOR_STATE_STATE_STORE_H_
