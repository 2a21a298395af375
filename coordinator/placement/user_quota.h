// User quotas: how much of the coordinator's memory and of the cluster one user's jobs may take
// (docs/security.md, "Resource bounds"). Pure functions over the job table and the bounds; the
// core calls them under its mutex at submit (refusals) and the scheduler applies the running-rank
// bound (a job that would pass it waits, without blocking other users' jobs of its kind).
//
// Admins are bound too: the legacy single --token and the no-users "anonymous" caller are admins,
// so exempting admins would leave single-token deployments, where one client in a loop can fill
// the coordinator's memory, without any bound. Operators raise the flags instead.
//
// Thread safety: pure functions.
#ifndef SHARDLINE_COORDINATOR_PLACEMENT_USER_QUOTA_H_
#define SHARDLINE_COORDINATOR_PLACEMENT_USER_QUOTA_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "coordinator/state/state.pb.h"
#include "proto/coordinator.pb.h"
#include "proto/job_spec.pb.h"

namespace shardline::coordinator {

// Each bound <= 0 means no bound.
struct UserQuotas {
  int max_pending_jobs_per_user = 1000;                 // --max_pending_jobs_per_user
  int max_running_ranks_per_user = 0;                   // --max_running_ranks_per_user
  int64_t max_spec_bytes_per_job = int64_t{1} << 20;    // --max_spec_bytes_per_job
  int64_t max_spec_bytes_per_user = int64_t{64} << 20;  // --max_spec_bytes_per_user
  int max_reason_bytes = 4096;                          // --max_reason_bytes
  // Where the two per-user bounds came from, as refusals name it: the flag, or the user's line
  // of the users file (QuotasFor).
  std::string pending_jobs_source = "--max_pending_jobs_per_user";
  std::string running_ranks_source = "--max_running_ranks_per_user";
};

// One user's own bounds from the users file (`max_running_ranks=N`, `max_pending_jobs=N` on the
// user's line; coordinator/auth/user_table.h); unset: the flag's value.
struct UserQuotaOverride {
  std::optional<int> max_running_ranks;
  std::optional<int> max_pending_jobs;
};
using UserQuotaOverrides = std::map<std::string, UserQuotaOverride>;

// `defaults` (the flags) with `user`'s overrides applied, their sources named.
UserQuotas QuotasFor(const UserQuotas& defaults, const UserQuotaOverrides& overrides,
                     const std::string& user);

// What `user`'s jobs hold now (WhoAmIResponse.usage without the bounds).
struct UserUsageCount {
  int pending_jobs = 0;    // jobs PENDING (queued, or waiting to restart)
  int running_ranks = 0;   // ranks of RUNNING attempts
  int64_t spec_bytes = 0;  // serialized specs of PENDING and RUNNING jobs
};

// Adds one job record to the usage of its owner when `job` is owned by `user`.
void CountUsage(const JobRecord& job, const std::string& user, UserUsageCount* usage);

// OK when `user` (holding `usage`) may submit `spec`. Errors: RESOURCE_EXHAUSTED naming the user,
// the numbers and the flag: `user bob has 8 pending jobs; at most 8 (--max_pending_jobs_per_user)`,
// a spec over --max_spec_bytes_per_job or taking the user past --max_spec_bytes_per_user, and a
// world_size above --max_running_ranks_per_user (such a job could never start).
absl::Status CheckSubmitQuota(const UserQuotas& quotas, const std::string& user,
                              const UserUsageCount& usage, const JobSpec& spec);

// OK when `text` (the free text field `field`, e.g. "cancel reason") is within
// --max_reason_bytes. Errors: RESOURCE_EXHAUSTED naming the field, its size and the flag.
absl::Status CheckReasonBytes(const UserQuotas& quotas, absl::string_view field,
                              absl::string_view text);

// The usage with its bounds, as WhoAmI answers it.
UserUsage UsageReport(const UserQuotas& quotas, const UserUsageCount& usage);

// The status message of a job that waits because starting it with `ranks` ranks would take
// `user` (running `running` ranks) past `max` (from `source`: the flag or the users file).
std::string RunningRanksWaitMessage(const std::string& user, int running, int ranks, int max,
                                    const std::string& source);

}  // namespace shardline::coordinator

#endif  // SHARDLINE_COORDINATOR_PLACEMENT_USER_QUOTA_H_
