// RankFiles: where the worker daemon keeps one rank process's files in its attempt directory.
//
// A rank's first process (generation 0) has spec-rank-R.yaml, metrics-rank-R.jsonl and
// rank-R.log; a replacement of a rank lost under fault_tolerance REPLICA_GROUPS (generation
// G >= 1, Assignment.generation) gets spec-rank-R.gen<G>.yaml, metrics-rank-R.gen<G>.jsonl and
// rank-R.gen<G>.log, so it never overwrites its predecessor's log (the one that says why it
// died) or the metrics the daemon may still be relaying. Generation 0 keeps the names every
// tool and test already reads.
#ifndef SHARDLINE_WORKER_RANK_FILES_H_
#define SHARDLINE_WORKER_RANK_FILES_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "worker/trainer_user.h"

namespace shardline::worker {

struct RankFiles {
  std::string spec;     // the job spec the trainer reads (--spec)
  std::string metrics;  // the trainer's metrics (--metrics_out), relayed by the daemon
  std::string log;      // stdout + stderr (rotated to log + ".1")
};

// The files of `rank`'s process of `generation` (>= 0) under `attempt_dir`.
RankFiles RankFilesFor(const std::string& attempt_dir, int rank, int generation);

// Creates `job_dir`, `attempt_dir` beneath it and the rank's files before its process starts:
// the spec (`spec_text`), and an empty metrics file in place of an old one.
// With a trainer user (--trainer_user) the trainer may read them and write only its metrics:
// both directories are root:<its group> 0750, so it can enter them but not create, rename or
// remove anything there, and no file the daemon writes by name (the rotated log, the spec) can
// be swapped for a link by job code; the spec is 0640 root:<group>; the metrics file is
// 0640 and the trainer user's (it truncates and appends). Errors: INTERNAL naming the path.
absl::Status PrepareRankFiles(const std::string& job_dir, const std::string& attempt_dir,
                              const RankFiles& files, const std::string& spec_text,
                              const std::optional<TrainerUser>& user);

}  // namespace shardline::worker

#endif  // SHARDLINE_WORKER_RANK_FILES_H_
