// TrainingMetrics: every job's training series (training_series.h), fed by rank 0's progress
// reports, read by GetJobMetrics and the Prometheus exposition, and made durable in batches:
// a report only marks its job dirty; TakeDirty hands the changed series to the state writer at
// most once per flush interval per job, so a job reporting every second costs one database
// write per interval, not one per report. A coordinator killed with SIGKILL loses the points
// since the last durable write; a clean shutdown writes every dirty series. So that nothing is
// lost for good, each job has a durable step (DurableStep): the newest step such that it and
// every point before it are in a write the state writer has made durable. The coordinator
// answers it to every progress report, and the relaying worker daemons keep the reports above
// it and send them again after losing the coordinator; a resent step the series covers changes
// nothing (training_series.h). A change at or below the durable step (a hole filled, a later
// attempt's truncation) lowers it to just below that step until the next write is durable.
//
// Thread safety: every method may be called from any thread (its own mutex, never held while
// calling out). The core calls Add under its own mutex (lock order: core, then this).
#ifndef SHARDLINE_COORDINATOR_OBSERVABILITY_TRAINING_METRICS_H_
#define SHARDLINE_COORDINATOR_OBSERVABILITY_TRAINING_METRICS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/observability/training_series.h"
#include "coordinator/state/state.pb.h"
#include "proto/coordinator.pb.h"

namespace shardline::coordinator {

// The series point of rank 0's progress report `r` of the job whose status (after the report)
// is `status`, received at `now`: a val_loss of 0 or NaN ("did not evaluate") becomes NaN, and
// the peak memory is the largest any rank reported.
MetricsPoint MetricsPointFromReport(const ProgressReport& r, const JobStatus& status,
                                    absl::Time now);

class TrainingMetrics {
 public:
  explicit TrainingMetrics(int capacity = TrainingSeries::kDefaultCapacity) : capacity_(capacity) {}

  // One logged step of rank 0 of `job_id` (see TrainingSeries::Add). Returns false when the
  // series already had it (nothing changed, nothing to write).
  bool Add(const std::string& job_id, const MetricsPoint& point);
  // A series reloaded from the state store (not dirty; durable up to its newest step).
  void Restore(const JobMetricsRecord& record);

  // The job's points after `after_step`, latest point, stride and step count (an empty response
  // for a job without reports).
  GetJobMetricsResponse Get(const std::string& job_id, int64_t after_step) const;
  // The newest report of each job in `job_ids` that has one.
  std::map<std::string, MetricsPoint> Latest(const std::vector<std::string>& job_ids) const;

  // A collected (finished) job: its series is dropped (the store's row goes with the job's).
  void Forget(const std::string& job_id);
  // A job that ended: its series is written at the next TakeDirty whatever the interval (no
  // report can come to resend its last points once the job is over).
  void Ended(const std::string& job_id);

  // Records to store: each dirty series whose last write is at least `interval` old (every
  // dirty one when `all`). They are no longer dirty afterwards. The caller queues each one and
  // then calls Queued with its write's ticket (the state writer's, increasing), in order.
  std::vector<JobMetricsRecord> TakeDirty(absl::Time now, absl::Duration interval,
                                          bool all = false);
  // The record of one job, when its series is dirty (then no longer dirty), for the write that
  // goes just before its terminal record (JobTable's before-end hook): a job whose end is
  // durable has its whole series durable too. The caller queues it and calls Queued, as above.
  std::optional<JobMetricsRecord> TakeDirtyJob(const std::string& job_id, absl::Time now);
  // The record of `job_id` that TakeDirty handed out first and that has no ticket yet is
  // queued as write `ticket`.
  void Queued(const std::string& job_id, int64_t ticket);
  // The job's durable step once every write up to `durable_ticket` is durable (0 for a job
  // without a durable point, or unknown).
  int64_t DurableStep(const std::string& job_id, int64_t durable_ticket);

 private:
  // A record handed out by TakeDirty: its write (ticket 0 until Queued) makes the series
  // durable up to `step` (lowered by changes at or below it made since).
  struct Write {
    int64_t ticket = 0;
    int64_t step = 0;
  };
  struct Job {
    TrainingSeries series;
    bool dirty = false;
    absl::Time written = absl::InfinitePast();
    int64_t durable_step = 0;
    bool ended = false;         // the job ended: written at once when dirty
    std::vector<Write> writes;  // oldest first
  };
  const int capacity_;
  mutable absl::Mutex mu_;
  std::map<std::string, Job> jobs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shardline::coordinator

#endif  // SHARDLINE_COORDINATOR_OBSERVABILITY_TRAINING_METRICS_H_
