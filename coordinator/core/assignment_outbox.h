// AssignmentOutbox: per-worker queues of START / STOP / PREEMPT assignments and their delivery over
// the worker's assignment stream.
//
// STARTs carry the rank's placement generation (fault_tolerance REPLICA_GROUPS replacements).
// Each worker has at most one stream; Open() starts a new one (a new generation), which
// supersedes the older stream (its next look gets ABORTED) and replaces the queue with the
// STARTs the caller wants re-sent. Assignments pushed before a worker's first stream wait in its
// queue until Open() replaces them. A START whose attempt ended before delivery is dropped at
// delivery (the caller says which attempts still run). Every push and new stream is reported to
// the ChangeFeed (WorkerChanged), which wakes waiting streams.
//
// This is the one place that builds assignments: STARTs from a job record's placement, STOPs
// and PREEMPTs from (job, attempt).
//
// Thread safety: none of its own. CoordinatorCore owns one (with the ChangeFeed it reports to)
// and calls it only under the core's mutex; NextLocked releases that mutex while it blocks.
#ifndef SHARDLINE_COORDINATOR_CORE_ASSIGNMENT_OUTBOX_H_
#define SHARDLINE_COORDINATOR_CORE_ASSIGNMENT_OUTBOX_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/core/change_feed.h"
#include "coordinator/state/state.pb.h"
#include "proto/coordinator.pb.h"

namespace shardline::coordinator {

// What every START of one attempt carries besides the job record and the rank's placement.
struct AttemptStartInfo {
  std::string rendezvous_namespace;  // "<job>/<attempt>"
  std::string master_addr;           // address of rank 0's node
  int64_t resume_step = 0;           // committed checkpoint step to resume from (0: none)
  std::string resume_from_job_id;    // the job checkpoint.resume_from names (registry), or ""
};

class AssignmentOutbox {
 public:
  // `feed` must outlive the outbox. STOPs (and STARTs) carry `stop_grace_period_s`.
  AssignmentOutbox(ChangeFeed* feed, int32_t stop_grace_period_s)
      : feed_(feed), grace_period_s_(stop_grace_period_s) {}

  // STARTs for the ranks of `rec`'s current attempt placed on `worker_id` (every rank when
  // empty), in rank order, each with the worker it goes to.
  std::vector<std::pair<std::string, Assignment>> Starts(const JobRecord& rec,
                                                         const AttemptStartInfo& info,
                                                         const std::string& worker_id) const;
  // Queues a START for every rank of `rec`'s current attempt on its worker.
  void PushStarts(const JobRecord& rec, const AttemptStartInfo& info);
  // Queues a STOP of every rank of (job_id, attempt) on `worker_id`.
  void PushStop(const std::string& worker_id, const std::string& job_id, int32_t attempt);
  // Queues a PREEMPT of (job_id, attempt) on `worker_id`: its ranks save and wait to be stopped.
  void PushPreempt(const std::string& worker_id, const std::string& job_id, int32_t attempt);
  // fault_tolerance REPLICA_GROUPS: queues the START of `rank` alone (a replacement, with its
  // placement's generation), and a STOP_RANK of `rank` (generation `generation` or older).
  void PushStart(const JobRecord& rec, const AttemptStartInfo& info, int32_t rank);
  void PushStopRank(const std::string& worker_id, const std::string& job_id, int32_t attempt,
                    int32_t rank, int32_t generation);

  // Whether a START of `rank` of (job_id, attempt) still waits in `worker_id`'s queue (its
  // worker has not been handed it, so it cannot be running there).
  bool StartQueued(const std::string& worker_id, const std::string& job_id, int32_t attempt,
                   int32_t rank) const;

  // Starts a new stream of `worker_id` whose queue is `resend`; returns its generation.
  int64_t Open(const std::string& worker_id, std::vector<Assignment> resend);
  // Forgets a (dead) worker's queue; its stream ends with ABORTED at its next look.
  void Drop(const std::string& worker_id);

  // Waits on `mu` (held by the caller) up to `wait` for the stream's next assignment; a START
  // for which `still_running(job_id, attempt)` is false is skipped. true: *out holds it; false:
  // nothing yet. Errors: ABORTED when a newer stream superseded `generation` (or the worker was
  // dropped), UNAVAILABLE once the feed is shut down.
  absl::StatusOr<bool> NextLocked(
      absl::Mutex* mu, const std::string& worker_id, int64_t generation, absl::Duration wait,
      const std::function<bool(const std::string& job_id, int32_t attempt)>& still_running,
      Assignment* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

 private:
  struct Queue {
    std::deque<Assignment> assignments;
    int64_t generation = 0;  // 0: no stream opened yet
  };
  void Push(const std::string& worker_id, Assignment a);

  ChangeFeed* const feed_;
  const int32_t grace_period_s_;
  std::map<std::string, Queue> queues_;  // by worker id
};

}  // namespace shardline::coordinator

#endif  // SHARDLINE_COORDINATOR_CORE_ASSIGNMENT_OUTBOX_H_
