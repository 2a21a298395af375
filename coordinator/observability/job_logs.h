// JobLogs: the coordinator's copy of the ranks' logs, shipped by the worker daemons (ShipLogs;
// the daemon dials out, so this works where the coordinator cannot reach the workers). One ring
// per (job, attempt, rank) keeps that rank's newest lines up to `bytes_per_rank` (a line is cut
// to `max_line_bytes`, and to the ring); when all rings together pass `max_total_bytes`, the logs
// of the job that got a line least recently go first (a finished job's logs stay readable until
// then), and when the job being written alone is over it, its least recently written rings are
// emptied (their lines counted dropped): no job's shipping makes it hold more. Every line a job
// takes gets the next job-wide sequence number, which orders the ranks' lines and lets a follower
// ask for what is new (GetLogsRequest.after_seq). Not persisted: a restarted coordinator starts
// empty (the workers keep their rotated files, docs/observability.md).
//
// Thread safety: every method may be called from any thread (its own mutex).
#ifndef SHARDLINE_COORDINATOR_OBSERVABILITY_JOB_LOGS_H_
#define SHARDLINE_COORDINATOR_OBSERVABILITY_JOB_LOGS_H_

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "proto/coordinator.pb.h"

namespace shardline::coordinator {

class JobLogs {
 public:
  struct Options {
    int64_t bytes_per_rank = 1 << 20;
    // The daemon cuts lines there already (worker/rank_log.h); a longer one is a forged chunk's
    // and would otherwise sit whole in a ring (a ring keeps its newest line whatever its size).
    int64_t max_line_bytes = 16 << 10;
    int64_t max_total_bytes = int64_t{256} << 20;
    // Longest answer of one Get (it says `truncated`; the caller asks again); below gRPC's
    // default 4 MiB message limit.
    int64_t max_response_bytes = 2 << 20;
  };
  JobLogs() : JobLogs(Options()) {}
  explicit JobLogs(const Options& options) : options_(options) {}

  // Takes the chunk's lines (the caller checked that the job and rank exist and that the
  // shipping worker may write them).
  void Append(const RankLogChunk& chunk);
  // The lines `req` selects (see GetLogsRequest); job_finished is left to the caller.
  GetLogsResponse Get(const GetLogsRequest& req) const;
  int64_t total_bytes() const;
  // A collected (finished) job: its lines are dropped.
  void Forget(const std::string& job_id);

 private:
  struct Ring {
    std::deque<LogLine> lines;
    int64_t bytes = 0;
    int64_t dropped = 0;  // evicted here plus dropped by the daemon
    int64_t touched = 0;  // order of the last Append, for eviction within a job
  };
  struct Log {
    std::map<std::pair<int32_t, int32_t>, Ring> rings;  // (attempt, rank)
    int64_t last_seq = 0;
    int64_t bytes = 0;
    int64_t touched = 0;  // order of the last Append, for eviction
  };
  // Brings total_bytes_ within max_total_bytes: other jobs first, then `keep`'s rings other
  // than `keep_ring`.
  void EvictLocked(const std::string& keep, std::pair<int32_t, int32_t> keep_ring)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Empties `keep`'s least recently written ring other than `keep_ring`; false if none has lines.
  bool EvictRingLocked(Log& log, std::pair<int32_t, int32_t> keep_ring)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  mutable absl::Mutex mu_;
  std::map<std::string, Log> jobs_ ABSL_GUARDED_BY(mu_);
  int64_t total_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t clock_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace shardline::coordinator

#endif  // SHARDLINE_COORDINATOR_OBSERVABILITY_JOB_LOGS_H_
