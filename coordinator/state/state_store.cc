#include "coordinator/state/state_store.h"

#include <sqlite3.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace shardline::coordinator {
namespace {

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS jobs (
  job_id TEXT PRIMARY KEY, seq INTEGER NOT NULL, record BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS checkpoints (
  job_id TEXT NOT NULL, step INTEGER NOT NULL, record BLOB NOT NULL,
  PRIMARY KEY (job_id, step));
CREATE TABLE IF NOT EXISTS workers (
  worker_id TEXT PRIMARY KEY, unused INTEGER NOT NULL, record BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS job_metrics (
  job_id TEXT PRIMARY KEY, unused INTEGER NOT NULL, record BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS worker_credentials (
  worker_id TEXT PRIMARY KEY, unused INTEGER NOT NULL, record BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS rendezvous (
  namespace TEXT NOT NULL, key BLOB NOT NULL, value BLOB NOT NULL,
  PRIMARY KEY (namespace, key));
)sql";

// Closes a statement on scope exit.
struct Stmt {
  sqlite3_stmt* s = nullptr;
  ~Stmt() { sqlite3_finalize(s); }
};

}  // namespace

absl::StatusOr<std::unique_ptr<StateStore>> StateStore::Open(const std::string& state_dir) {
  if (state_dir.empty()) return absl::InvalidArgumentError("state_dir must not be empty");
  if (mkdir(state_dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return absl::UnavailableError(
        absl::StrCat("cannot create state_dir ", state_dir, ": ", std::strerror(errno)));
  }
  const std::string path = absl::StrCat(state_dir, "/coordinator.db");
  sqlite3* db = nullptr;
  const int rc =
      sqlite3_open_v2(path.c_str(), &db,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    sqlite3_close(db);
    return absl::UnavailableError(absl::StrCat("cannot open ", path, ": ", msg));
  }
  std::unique_ptr<StateStore> store(new StateStore(db));
  absl::MutexLock lock(&store->mu_);
  sqlite3_busy_timeout(db, 5000);
  if (absl::Status s = store->Exec("PRAGMA journal_mode=WAL;"); !s.ok()) return s;
  if (absl::Status s = store->Exec("PRAGMA synchronous=FULL;"); !s.ok()) return s;
  if (absl::Status s = store->Exec(kSchema); !s.ok()) {
    return absl::DataLossError(absl::StrCat("cannot create schema in ", path, ": ", s.message()));
  }
  return store;
}

StateStore::~StateStore() {
  absl::MutexLock lock(&mu_);
  sqlite3_close(db_);
}

absl::Status StateStore::Exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    return absl::UnavailableError(absl::StrCat("sqlite: ", msg));
  }
  return absl::OkStatus();
}

absl::Status StateStore::Upsert(const char* sql, absl::string_view k1, int64_t k2,
                                const std::string& blob) {
  absl::MutexLock lock(&mu_);
  Stmt st;
  if (sqlite3_prepare_v2(db_, sql, -1, &st.s, nullptr) != SQLITE_OK) {
    return absl::InternalError(absl::StrCat("sqlite prepare: ", sqlite3_errmsg(db_)));
  }
  sqlite3_bind_text(st.s, 1, k1.data(), static_cast<int>(k1.size()), SQLITE_TRANSIENT);
  sqlite3_bind_int64(st.s, 2, k2);
  sqlite3_bind_blob(st.s, 3, blob.data(), static_cast<int>(blob.size()), SQLITE_TRANSIENT);
  if (sqlite3_step(st.s) != SQLITE_DONE) {
    return absl::UnavailableError(absl::StrCat("sqlite write: ", sqlite3_errmsg(db_)));
  }
  return absl::OkStatus();
}

absl::Status StateStore::PutJob(const JobRecord& job) {
  return Upsert("INSERT OR REPLACE INTO jobs (job_id, seq, record) VALUES (?1, ?2, ?3)",
                job.status().job_id(), job.seq(), job.SerializeAsString());
}

absl::Status StateStore::PutCheckpoint(const CheckpointRecord& c) {
  return Upsert("INSERT OR REPLACE INTO checkpoints (job_id, step, record) VALUES (?1, ?2, ?3)",
                c.info().job_id(), c.info().step(), c.SerializeAsString());
}

absl::Status StateStore::PutWorker(const WorkerInfo& w) {
  return Upsert("INSERT OR REPLACE INTO workers (worker_id, unused, record) VALUES (?1, ?2, ?3)",
                w.worker_id(), 0, w.SerializeAsString());
}

absl::Status StateStore::PutJobMetrics(const JobMetricsRecord& m) {
  return Upsert("INSERT OR REPLACE INTO job_metrics (job_id, unused, record) VALUES (?1, ?2, ?3)",
                m.job_id(), 0, m.SerializeAsString());
}

absl::Status StateStore::PutWorkerCredential(const WorkerCredentialRecord& r) {
  return Upsert(
      "INSERT OR REPLACE INTO worker_credentials (worker_id, unused, record) VALUES (?1, ?2, ?3)",
      r.worker_id(), 0, r.SerializeAsString());
}

absl::Status StateStore::DeleteCheckpoint(absl::string_view job_id, int64_t step) {
  absl::MutexLock lock(&mu_);
  Stmt st;
  if (sqlite3_prepare_v2(db_, "DELETE FROM checkpoints WHERE job_id = ?1 AND step = ?2", -1, &st.s,
                         nullptr) != SQLITE_OK) {
    return absl::InternalError(absl::StrCat("sqlite prepare: ", sqlite3_errmsg(db_)));
  }
  sqlite3_bind_text(st.s, 1, job_id.data(), static_cast<int>(job_id.size()), SQLITE_TRANSIENT);
  sqlite3_bind_int64(st.s, 2, step);
  if (sqlite3_step(st.s) != SQLITE_DONE) {
    return absl::UnavailableError(absl::StrCat("sqlite delete: ", sqlite3_errmsg(db_)));
  }
  return absl::OkStatus();
}

absl::Status StateStore::DeleteJob(absl::string_view job_id) {
  absl::MutexLock lock(&mu_);
  // The job's row last: a failure part way leaves a job with fewer rows of its own, which the
  // next collection (after a restart) deletes again, never rows without their job.
  for (const char* sql :
       {"DELETE FROM checkpoints WHERE job_id = ?1", "DELETE FROM job_metrics WHERE job_id = ?1",
        "DELETE FROM jobs WHERE job_id = ?1"}) {
    Stmt st;
    if (sqlite3_prepare_v2(db_, sql, -1, &st.s, nullptr) != SQLITE_OK) {
      return absl::InternalError(absl::StrCat("sqlite prepare: ", sqlite3_errmsg(db_)));
    }
    sqlite3_bind_text(st.s, 1, job_id.data(), static_cast<int>(job_id.size()), SQLITE_TRANSIENT);
    if (sqlite3_step(st.s) != SQLITE_DONE) {
      return absl::UnavailableError(absl::StrCat("sqlite delete: ", sqlite3_errmsg(db_)));
    }
  }
  return absl::OkStatus();
}

absl::Status StateStore::ApplyRendezvous(const std::vector<RendezvousWrite>& writes) {
  if (writes.empty()) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  Stmt put;
  Stmt drop;
  if (sqlite3_prepare_v2(db_,
                         "INSERT OR REPLACE INTO rendezvous (namespace, key, value) "
                         "VALUES (?1, ?2, ?3)",
                         -1, &put.s, nullptr) != SQLITE_OK ||
      sqlite3_prepare_v2(db_, "DELETE FROM rendezvous WHERE namespace = ?1", -1, &drop.s,
                         nullptr) != SQLITE_OK) {
    return absl::InternalError(absl::StrCat("sqlite prepare: ", sqlite3_errmsg(db_)));
  }
  RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE;"));
  for (const RendezvousWrite& w : writes) {
    sqlite3_stmt* st = w.delete_namespace ? drop.s : put.s;
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    sqlite3_bind_text(st, 1, w.ns.data(), static_cast<int>(w.ns.size()), SQLITE_STATIC);
    if (!w.delete_namespace) {
      // Blobs: a key or value may hold any bytes (the trainers' stores write binary values).
      sqlite3_bind_blob(st, 2, w.key.data(), static_cast<int>(w.key.size()), SQLITE_STATIC);
      sqlite3_bind_blob(st, 3, w.value.data(), static_cast<int>(w.value.size()), SQLITE_STATIC);
    }
    if (sqlite3_step(st) != SQLITE_DONE) {
      const std::string msg = sqlite3_errmsg(db_);
      (void)Exec("ROLLBACK;");
      return absl::UnavailableError(absl::StrCat("sqlite write: ", msg));
    }
  }
  if (absl::Status s = Exec("COMMIT;"); !s.ok()) {
    (void)Exec("ROLLBACK;");
    return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<RendezvousRow>> StateStore::LoadRendezvous() {
  absl::MutexLock lock(&mu_);
  Stmt st;
  if (sqlite3_prepare_v2(db_,
                         "SELECT namespace, key, value FROM rendezvous ORDER BY namespace, key", -1,
                         &st.s, nullptr) != SQLITE_OK) {
    return absl::InternalError(absl::StrCat("sqlite prepare: ", sqlite3_errmsg(db_)));
  }
  std::vector<RendezvousRow> out;
  auto column = [&](int i) {
    const void* p = sqlite3_column_blob(st.s, i);
    const int n = sqlite3_column_bytes(st.s, i);
    return n > 0 ? std::string(static_cast<const char*>(p), n) : std::string();
  };
  int rc;
  while ((rc = sqlite3_step(st.s)) == SQLITE_ROW) {
    out.push_back({column(0), column(1), column(2)});
  }
  if (rc != SQLITE_DONE) {
    return absl::UnavailableError(absl::StrCat("sqlite read: ", sqlite3_errmsg(db_)));
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> StateStore::LoadBlobs(const char* sql) {
  absl::MutexLock lock(&mu_);
  Stmt st;
  if (sqlite3_prepare_v2(db_, sql, -1, &st.s, nullptr) != SQLITE_OK) {
    return absl::InternalError(absl::StrCat("sqlite prepare: ", sqlite3_errmsg(db_)));
  }
  std::vector<std::string> out;
  int rc;
  while ((rc = sqlite3_step(st.s)) == SQLITE_ROW) {
    const void* p = sqlite3_column_blob(st.s, 0);
    const int n = sqlite3_column_bytes(st.s, 0);
    out.emplace_back(static_cast<const char*>(p), n);
  }
  if (rc != SQLITE_DONE) {
    return absl::UnavailableError(absl::StrCat("sqlite read: ", sqlite3_errmsg(db_)));
  }
  return out;
}

namespace {
template <typename T>
absl::StatusOr<std::vector<T>> ParseAll(absl::StatusOr<std::vector<std::string>> blobs,
                                        const char* what) {
  if (!blobs.ok()) return blobs.status();
  std::vector<T> out(blobs->size());
  for (size_t i = 0; i < blobs->size(); ++i) {
    if (!out[i].ParseFromString((*blobs)[i])) {
      return absl::DataLossError(
          absl::StrCat("state store: ", what, " row ", i, " does not parse"));
    }
  }
  return out;
}
}  // namespace

absl::StatusOr<std::vector<JobRecord>> StateStore::LoadJobs() {
  return ParseAll<JobRecord>(LoadBlobs("SELECT record FROM jobs ORDER BY seq"), "jobs");
}

absl::StatusOr<std::vector<CheckpointRecord>> StateStore::LoadCheckpoints() {
  return ParseAll<CheckpointRecord>(
      LoadBlobs("SELECT record FROM checkpoints ORDER BY job_id, step"), "checkpoints");
}

absl::StatusOr<std::vector<WorkerInfo>> StateStore::LoadWorkers() {
  return ParseAll<WorkerInfo>(LoadBlobs("SELECT record FROM workers ORDER BY worker_id"),
                              "workers");
}

absl::StatusOr<std::vector<JobMetricsRecord>> StateStore::LoadJobMetrics() {
  return ParseAll<JobMetricsRecord>(LoadBlobs("SELECT record FROM job_metrics ORDER BY job_id"),
                                    "job_metrics");
}

absl::StatusOr<std::vector<WorkerCredentialRecord>> StateStore::LoadWorkerCredentials() {
  return ParseAll<WorkerCredentialRecord>(
      LoadBlobs("SELECT record FROM worker_credentials ORDER BY worker_id"), "worker_credentials");
}

}  // namespace shardline::coordinator
