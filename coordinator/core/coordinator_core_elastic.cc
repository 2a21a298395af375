// Grow-back: an elastic job that shrank (a restart placed it on fewer slots than its spec's
// world, elastic.min_world_size) grows again once slots return, at its next committed
// checkpoint, so the restart costs only the steps trained since that commit. The new attempt
// resumes from the checkpoint and reshards it to the larger world on load, as the shrink did.
// Torchelastic does the same when nodes join within max_nodes (a restart of the worker group);
// here the checkpoint commit is the moment, since it bounds the work lost.
#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "coordinator/core/coordinator_core.h"
#include "coordinator/core/job_state_machine.h"
#include "coordinator/placement/planner.h"
#include "coordinator/placement/scheduler.h"

namespace shardline::coordinator {

void CoordinatorCore::MaybeGrowLocked(JobRecord& job, int64_t step) {
  const JobStatus& st = job.status();
  const JobSpec& spec = st.spec();
  // REPLICA_GROUPS jobs place replacement groups while they train (coordinator_core_ft.cc).
  if (st.state() != RUNNING || spec.elastic().min_world_size() <= 0 ||
      spec.fault_tolerance().mode() == FaultToleranceSpec::REPLICA_GROUPS) {
    return;
  }
  const int32_t now_world = st.world_size();
  if (now_world >= spec.world_size() || step >= st.total_steps()) return;
  int32_t room = now_world;  // Its own slots, free again once its ranks stop.
  for (const NodeCapacity& c : registry_.FreeCapacity(SlotKindFor(spec))) {
    room += static_cast<int32_t>(c.free_slots.size());
  }
  // Capped by the owner's running-rank quota: the new attempt replaces this one's ranks.
  const RankQuota quota = RankQuotaLocked();
  if (const int max = quota.MaxFor(st.owner()); max > 0) {
    auto it = quota.running.find(st.owner());
    const int others = (it == quota.running.end() ? 0 : it->second) - now_world;
    room = std::min(room, max - others);
  }
  const int32_t target = ElasticWorldSize(spec, room);
  if (target <= now_world) return;
  const std::string reason = absl::StrCat("slots for ", target, " ranks are free: growing from ",
                                          now_world, " to ", target, " ranks (spec world_size ",
                                          spec.world_size(), ") from checkpoint step ", step);
  EndAttemptLocked(job, /*send_stop=*/true);
  if (absl::Status s = JobStateMachine(&job, clock_->Now()).Requeue("GROWING", reason); !s.ok()) {
    SL_LOG(ERROR) << s;
    return;
  }
  SL_LOG(INFO) << "job " << st.job_id() << " attempt " << st.attempt() << ": " << reason;
  jobs_.Changed(job);
}

}  // namespace shardline::coordinator
