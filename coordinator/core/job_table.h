// JobTable: the job records by id. It gives new jobs their ids (NewJobId below; seq keeps the
// submission order), finds and lists them, and makes every change durable (StateStore, when there
// is one) and visible (ChangeFeed). Which changes a record may undergo is JobStateMachine's; the
// core drives them.
//
// Thread safety: none of its own. CoordinatorCore owns one and calls it only under its mutex.
#ifndef SHARDLINE_COORDINATOR_CORE_JOB_TABLE_H_
#define SHARDLINE_COORDINATOR_CORE_JOB_TABLE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "coordinator/core/change_feed.h"
#include "coordinator/state/state.pb.h"
#include "coordinator/state/state_writer.h"
#include "proto/coordinator.pb.h"

namespace shardline::coordinator {

// A new job id: "job-" + the submission time in unix milliseconds in base 36 (8 characters
// until the year 2059) + 4 random base-36 characters, e.g. "job-mi5x3k2aq7zp". Short and
// typeable, and never reused across coordinator lifetimes, with or without a state dir: ids
// restarting at "job-1" made a new job resume (and overwrite) an old job's checkpoints under
// <checkpoint.dir>/<job id>. The random part separates jobs submitted in the same millisecond;
// JobTable also redraws an id it already holds.
std::string NewJobId(absl::Time now);

class JobTable {
 public:
  using Records = std::map<std::string, JobRecord>;  // by job id

  // `writer` and `feed` must outlive the table. A record keeps its newest `max_events` events
  // (older ones are dropped when it changes, counted in JobStatus.events_dropped).
  JobTable(StateWriter* writer, ChangeFeed* feed, int max_events = 1000)
      : writer_(writer), feed_(feed), max_events_(max_events) {}

  // A new PENDING job running `spec` (event SUBMITTED at `now`) with a fresh id and the next
  // seq; not in the table yet: store it (StateWriter::PutJobOrDrop), then Add it.
  absl::StatusOr<JobRecord> NewJob(const JobSpec& spec, absl::Time now);
  // Adds a record made by NewJob (once stored) and reports it to the feed.
  JobRecord* Add(JobRecord job);
  // NewJob, PutJobOrDrop, Add: for callers that may block on the store (tests).
  // Errors: the store's (nothing is added then).
  absl::StatusOr<JobRecord*> Submit(const JobSpec& spec, absl::Time now);
  // A record reloaded from the store: added as it is, neither stored again nor reported changed.
  JobRecord& Restore(const JobRecord& rec);

  // Errors: NOT_FOUND "unknown job <id>".
  absl::StatusOr<JobRecord*> Find(const std::string& job_id);
  absl::StatusOr<const JobRecord*> Find(const std::string& job_id) const;
  // Drops `job`'s events beyond the newest max_events, queues its write (StateWriter: in order,
  // off the caller's thread) and reports it to the feed. Returns the write's ticket:
  // StateWriter::Wait on it says whether it is durable.
  StateWriter::Ticket Changed(JobRecord& job);
  // Called by Changed with a job's id just before it queues the record of a job in a terminal
  // state: the core queues the job's unwritten training series there, so the writer (in order)
  // makes the series durable no later than the end (no report can resend its last points once
  // the job has ended; found by the chaos soak, #30).
  void SetBeforeEndWrite(std::function<void(const std::string& job_id)> hook) {
    before_end_write_ = std::move(hook);
  }
  // A change of `job`'s training progress only (latest step, loss, throughput): reported to the
  // feed at once, its write deferred until FlushDeferred finds it `interval` old, or a Changed
  // of the job writes it along. Rank 0 reports progress every log_every steps, every job at
  // once: one state write (and fsync) per report made the store the coordinator's bottleneck at
  // a thousand jobs. After a crash a job's progress is then at most that interval old; its
  // state, events and checkpoints are written by Changed, at once.
  void ProgressChanged(JobRecord& job, absl::Time now);
  // Queues the writes of jobs whose progress changed at least `interval` before `now` (all of
  // them when `all`: at shutdown).
  void FlushDeferred(absl::Time now, absl::Duration interval, bool all);

  // Statuses of the jobs in any of `states` (empty: all), in submission order.
  std::vector<JobStatus> List(const std::vector<JobState>& states) const;
  // The same, from the first job with seq > `after_seq`, at most `limit` of them; `*more` says
  // whether matching jobs follow, `*last_seq` is the seq of the last one returned. With
  // `newest_first`, the jobs with seq < `after_seq` (0: all), newest first.
  std::vector<JobStatus> ListPage(const std::vector<JobState>& states, int64_t after_seq, int limit,
                                  int64_t* last_seq, bool* more, bool newest_first = false) const;
  // ListJobs' page: `req.page_size` jobs (0: 100, or `max_page_size` if lower) of the states asked
  // for, after the job its page_token names; next_page_token set when more follow. Errors:
  // INVALID_ARGUMENT for a page_size outside [0, max_page_size] (naming --max_list_page_size) or
  // a page_token this table did not issue.
  // `newest_first`: the dashboard's order (its tokens are only good for such pages).
  absl::StatusOr<ListJobsResponse> Page(const ListJobsRequest& req, int max_page_size,
                                        bool newest_first = false) const;
  std::map<JobState, int> CountByState() const;
  // Finished-job retention: removes the finished jobs (SUCCEEDED, FAILED, CANCELLED) that
  // finished more than `ttl` before `now` (ttl <= 0: none), then the oldest finished beyond
  // `max_finished` (<= 0: no count bound); never a PENDING or RUNNING job. Returns their ids,
  // oldest first: the caller frees the rest of their state and deletes their stored rows.
  std::vector<std::string> CollectFinished(absl::Time now, absl::Duration ttl, int max_finished);
  // Ids of the jobs that finished at or after `since_unix_ms`.
  std::vector<std::string> FinishedSince(int64_t since_unix_ms) const;
  Records& records() { return jobs_; }
  const Records& records() const { return jobs_; }

 private:
  void TrimEvents(JobRecord& job) const;

  StateWriter* const writer_;
  ChangeFeed* const feed_;
  const int max_events_;
  Records jobs_;
  std::set<std::string> new_ids_;  // handed out by NewJob, not yet added
  // Jobs with an unwritten progress change -> when the first one happened.
  std::map<std::string, absl::Time> deferred_;
  std::function<void(const std::string&)> before_end_write_;
  int64_t next_seq_ = 1;
};

}  // namespace shardline::coordinator

#endif  // SHARDLINE_COORDINATOR_CORE_JOB_TABLE_H_
