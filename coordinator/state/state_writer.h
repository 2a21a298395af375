// StateWriter: applies the coordinator's state writes (StateStore) in order on one writer
// thread, so no SQLite write or fsync happens under the core's mutex (a slow disk stalled every
// heartbeat), and tells each RPC when its write is durable.
//
//   ticket = writer.PutJob(record);        // under the core mutex: a copy is queued, no I/O
//   RETURN_IF_ERROR(writer.Wait(ticket));  // after releasing it: durable, or why not
//
// A write that fails (a full disk, an I/O error) stays at the head of the queue and is retried
// every retry_interval, so the writes that follow it keep their order and none is lost while the
// process lives; meanwhile the writer is read-only (read_only_reason() says why) and Wait
// answers UNAVAILABLE with that reason for every write at or after the failed one. The core then
// refuses user mutations and keeps serving reads; when a retry succeeds the queue drains and the
// writer is writable again. PutJobOrDrop is for a write whose RPC fails as a whole (SubmitJob
// adds a job only once it is stored): that write is dropped, not retried, when it fails.
//
// Rendezvous values (PutRendezvousValue, DeleteRendezvousNamespace) are batched: while a write
// is applied, the rendezvous writes queued behind it join one batch (at most
// kMaxRendezvousBatch writes), stored in one transaction, so the thousands of Sets of a large
// attempt's bootstrap cost a few syncs, not one each. Nobody waits for them: they only need to
// survive a restart of the coordinator process.
//
// Without a store (a coordinator without --state_dir) every write is durable at once.
//
// Thread safety: every method may be called from any thread.
#ifndef SHARDLINE_COORDINATOR_STATE_STATE_WRITER_H_
#define SHARDLINE_COORDINATOR_STATE_STATE_WRITER_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/state/state.pb.h"
#include "coordinator/state/state_store.h"
#include "proto/coordinator.pb.h"

namespace shardline::coordinator {

class StateWriter {
 public:
  using Ticket = int64_t;  // 0: nothing to wait for

  // `store` may be null (in memory only). Starts the writer thread when there is a store.
  StateWriter(std::unique_ptr<StateStore> store, absl::Duration retry_interval);
  // Tries every queued write once more, then stops the thread.
  ~StateWriter();

  // Queue a copy of the record; no I/O on the calling thread.
  Ticket PutJob(const JobRecord& job);
  Ticket PutCheckpoint(const CheckpointRecord& checkpoint);
  Ticket DeleteCheckpoint(const std::string& job_id, int64_t step);
  Ticket DeleteJob(const std::string& job_id);
  Ticket PutWorker(const WorkerInfo& worker);
  Ticket PutJobMetrics(const JobMetricsRecord& metrics);
  Ticket PutWorkerCredential(const WorkerCredentialRecord& record);
  // Batched (see above); the ticket is the batch's.
  Ticket PutRendezvousValue(const std::string& ns, const std::string& key,
                            const std::string& value);
  Ticket DeleteRendezvousNamespace(const std::string& ns);
  static constexpr size_t kMaxRendezvousBatch = 4096;
  // Stores `job` and waits for it; on failure the write is dropped (not retried) and the error
  // returned (UNAVAILABLE naming the reason). Call without holding locks the writer may need.
  absl::Status PutJobOrDrop(const JobRecord& job);

  // Waits until the write of `ticket` (and every earlier one) is durable. Errors: UNAVAILABLE
  // with the store's reason when it failed (it stays queued and is retried unless dropped), or
  // when the writer stops first.
  absl::Status Wait(Ticket ticket);

  // The newest ticket handed out (0 before any).
  Ticket last_ticket() const;
  // Every write up to this ticket is durable (or was dropped); never blocks.
  Ticket durable_ticket() const;
  // True while a failed write waits at the head of the queue: the on-disk state lags memory.
  bool stuck() const;
  // Why the last write failed; empty once a write succeeds again.
  std::string read_only_reason() const;

  // OK, or UNAVAILABLE "coordinator is read-only: ..." while a failed write is retried: the core
  // refuses user mutations then (reads and the cluster's own reports go on).
  absl::Status CheckWritable() const;
  // Wait(ticket) for an RPC's answer: UNAVAILABLE "<what> is not durable: <reason>; the
  // coordinator is read-only until ..." when it failed.
  absl::Status WaitDurable(Ticket ticket, const std::string& what);

  // For loading at start-up, before any write is queued. Null without a store.
  StateStore* store() const { return store_.get(); }

 private:
  struct Write {
    Ticket ticket = 0;
    bool drop_on_failure = false;
    std::function<absl::Status(StateStore*)> apply;
    // A rendezvous batch (`apply` stores it); later rendezvous writes join it while it is not
    // being applied.
    std::shared_ptr<std::vector<RendezvousWrite>> rendezvous;
  };
  Ticket Enqueue(std::function<absl::Status(StateStore*)> apply, bool drop_on_failure);
  Ticket EnqueueRendezvous(RendezvousWrite write);
  void Run();

  const std::unique_ptr<StateStore> store_;
  const absl::Duration retry_interval_;
  mutable absl::Mutex mu_;
  std::deque<Write> queue_ ABSL_GUARDED_BY(mu_);
  Ticket next_ ABSL_GUARDED_BY(mu_) = 1;
  Ticket done_ ABSL_GUARDED_BY(mu_) = 0;           // every write up to this one applied or dropped
  Ticket failing_ ABSL_GUARDED_BY(mu_) = 0;        // the head write that failed, retried; 0: none
  std::set<Ticket> dropped_ ABSL_GUARDED_BY(mu_);  // failed PutJobOrDrop writes not yet waited
  std::string reason_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool applying_ ABSL_GUARDED_BY(mu_) = false;  // Run applies the head without mu_
  std::thread thread_;
};

}  // namespace shardline::coordinator

#endif  // SHARDLINE_COORDINATOR_STATE_STATE_WRITER_H_
