// CoordinatorCore's per-user quotas: what each user's jobs hold, the bounds that apply to them
// (the flags, or the user's own from the users file: SetUserQuotas) and the running ranks the
// scheduler orders users fairly by (coordinator/placement/user_quota.h, scheduler.h).
#include <string>
#include <utility>

#include "coordinator/core/coordinator_core.h"
#include "coordinator/placement/user_quota.h"

namespace shardline::coordinator {

UserUsageCount CoordinatorCore::UsageLocked(const std::string& user) const {
  UserUsageCount usage;
  if (auto it = submitting_.find(user); it != submitting_.end()) usage = it->second;
  for (const auto& [id, job] : jobs_.records()) CountUsage(job, user, &usage);
  return usage;
}

RankQuota CoordinatorCore::RankQuotaLocked() const {
  RankQuota q;
  q.max_per_user = options_.quotas.max_running_ranks_per_user;
  for (const auto& [user, o] : user_quotas_) {
    if (!o.max_running_ranks.has_value()) continue;
    const UserQuotas mine = QuotasFor(options_.quotas, user_quotas_, user);
    q.own[user] = {mine.max_running_ranks_per_user, mine.running_ranks_source};
  }
  // Every owner's running ranks, bound or not: the scheduler orders users fairly by them.
  for (const auto& [id, job] : jobs_.records()) {
    if (job.status().state() == RUNNING)
      q.running[job.status().owner()] += job.status().placement_size();
  }
  return q;
}

UserUsage CoordinatorCore::UsageOf(const std::string& user) const {
  absl::MutexLock lock(&mu_);
  return UsageReport(QuotasFor(options_.quotas, user_quotas_, user), UsageLocked(user));
}

void CoordinatorCore::SetUserQuotas(UserQuotaOverrides overrides) {
  absl::MutexLock lock(&mu_);
  user_quotas_ = std::move(overrides);
}

}  // namespace shardline::coordinator
