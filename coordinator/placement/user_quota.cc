#include "coordinator/placement/user_quota.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace shardline::coordinator {

void CountUsage(const JobRecord& job, const std::string& user, UserUsageCount* usage) {
  const JobStatus& st = job.status();
  if (st.owner() != user) return;
  if (st.state() == PENDING) {
    usage->pending_jobs++;
  } else if (st.state() == RUNNING) {
    usage->running_ranks += st.placement_size();
  } else {
    return;  // finished jobs hold no quota (their retention is --max_finished_jobs)
  }
  usage->spec_bytes += static_cast<int64_t>(st.spec().ByteSizeLong());
}

absl::Status CheckSubmitQuota(const UserQuotas& q, const std::string& user,
                              const UserUsageCount& usage, const JobSpec& spec) {
  if (q.max_pending_jobs_per_user > 0 && usage.pending_jobs >= q.max_pending_jobs_per_user) {
    return absl::ResourceExhaustedError(
        absl::StrCat("user ", user, " has ", usage.pending_jobs, " pending jobs; at most ",
                     q.max_pending_jobs_per_user, " (", q.pending_jobs_source, ")"));
  }
  const int64_t bytes = static_cast<int64_t>(spec.ByteSizeLong());
  if (q.max_spec_bytes_per_job > 0 && bytes > q.max_spec_bytes_per_job) {
    return absl::ResourceExhaustedError(absl::StrCat("job spec of ", bytes, " bytes; at most ",
                                                     q.max_spec_bytes_per_job,
                                                     " (--max_spec_bytes_per_job)"));
  }
  if (q.max_spec_bytes_per_user > 0 && usage.spec_bytes + bytes > q.max_spec_bytes_per_user) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "user ", user, " holds ", usage.spec_bytes,
        " bytes of specs in pending and running jobs; this one's ", bytes,
        " would make it more than ", q.max_spec_bytes_per_user, " (--max_spec_bytes_per_user)"));
  }
  // A first attempt needs the whole world at once, so a world above the bound could never start;
  // refusing it now beats a job that waits forever.
  if (q.max_running_ranks_per_user > 0 && spec.world_size() > q.max_running_ranks_per_user) {
    return absl::ResourceExhaustedError(
        absl::StrCat("job of world_size ", spec.world_size(), " could never start: user ", user,
                     " may run at most ", q.max_running_ranks_per_user, " ranks at once (",
                     q.running_ranks_source, ")"));
  }
  return absl::OkStatus();
}

absl::Status CheckReasonBytes(const UserQuotas& q, absl::string_view field,
                              absl::string_view text) {
  if (q.max_reason_bytes <= 0 || text.size() <= static_cast<size_t>(q.max_reason_bytes)) {
    return absl::OkStatus();
  }
  return absl::ResourceExhaustedError(absl::StrCat(field, " of ", text.size(), " bytes; at most ",
                                                   q.max_reason_bytes, " (--max_reason_bytes)"));
}

UserUsage UsageReport(const UserQuotas& q, const UserUsageCount& usage) {
  UserUsage u;
  u.set_pending_jobs(usage.pending_jobs);
  u.set_max_pending_jobs(std::max(0, q.max_pending_jobs_per_user));
  u.set_running_ranks(usage.running_ranks);
  u.set_max_running_ranks(std::max(0, q.max_running_ranks_per_user));
  u.set_spec_bytes(usage.spec_bytes);
  u.set_max_spec_bytes(std::max<int64_t>(0, q.max_spec_bytes_per_user));
  u.set_max_spec_bytes_per_job(std::max<int64_t>(0, q.max_spec_bytes_per_job));
  u.set_max_reason_bytes(std::max(0, q.max_reason_bytes));
  u.set_pending_jobs_source(q.pending_jobs_source);
  u.set_running_ranks_source(q.running_ranks_source);
  return u;
}

std::string RunningRanksWaitMessage(const std::string& user, int running, int ranks, int max,
                                    const std::string& source) {
  return absl::StrCat("waiting: user ", user, " runs ", running, " ranks; this job's ", ranks,
                      " would make it more than ", max, " (", source, ")");
}

UserQuotas QuotasFor(const UserQuotas& defaults, const UserQuotaOverrides& overrides,
                     const std::string& user) {
  UserQuotas q = defaults;
  auto it = overrides.find(user);
  if (it == overrides.end()) return q;
  if (it->second.max_running_ranks.has_value()) {
    q.max_running_ranks_per_user = *it->second.max_running_ranks;
    q.running_ranks_source = absl::StrCat("max_running_ranks of user ", user, " in the users file");
  }
  if (it->second.max_pending_jobs.has_value()) {
    q.max_pending_jobs_per_user = *it->second.max_pending_jobs;
    q.pending_jobs_source = absl::StrCat("max_pending_jobs of user ", user, " in the users file");
  }
  return q;
}

}  // namespace shardline::coordinator
