// How shardctl shows a job: the live one-line progress view for a terminal, the plain line for
// logs and pipes, and the multi-line status block. Pure functions of a JobStatus, so they are
// tested without a coordinator.
//
// Thread safety: pure functions.
#ifndef SHARDLINE_CLI_PROGRESS_VIEW_H_
#define SHARDLINE_CLI_PROGRESS_VIEW_H_

#include <string>
#include <vector>

#include "proto/coordinator.pb.h"

namespace shardline::cli {

// "RUNNING  step 120/400 [######......] 30%  loss 2.3141  12.4k tok/s  ETA 1m05s  attempt 1"
// `width` bounds the bar; no trailing newline.
std::string ProgressLine(const JobStatus& status, int bar_width = 20);

// Durations as "45s", "3m07s", "2h05m"; negative or NaN as "--".
std::string FormatDuration(double seconds);

// Rates as "950 tok/s", "12.4k tok/s", "3.10M tok/s".
std::string FormatRate(double tokens_per_s);

// Bytes as "512 B", "3.0 MiB", "1.25 GiB".
std::string FormatBytes(int64_t bytes);

// The block `shardctl status JOB` prints: state, attempt, world, progress, placement, events.
std::string StatusBlock(const JobStatus& status);

// The table `shardctl list` prints: a header and one line per job (id, name, owner, progress).
// The id, name and owner columns are as wide as their longest entry, so they line up whatever
// the ids (job-<ms base 36><4 chars> is 16 characters) and names are.
std::string JobListTable(const std::vector<JobStatus>& jobs);

// "PENDING", "RUNNING", ...
std::string JobStateName(JobState state);

}  // namespace shardline::cli

#endif  // SHARDLINE_CLI_PROGRESS_VIEW_H_
