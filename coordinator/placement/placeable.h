// Whether a submitted job could ever be placed: a job that needs more slots of its kind than the
// cluster has would stay PENDING forever, holding its owner's pending-job quota and the
// coordinator's memory (#31 item 7). SubmitJob refuses it, with the numbers.
//
// `max_world_size` (--max_world_size): 0 (the default) bounds a job by the slots of its kind on
// the workers alive now, once any worker is alive (before the first registers, the cluster is
// starting and every job is taken); N > 0 is a fixed bound instead, for a cluster that grows
// (autoscaling: more workers than are alive now); -1 turns the check off. The slots a job needs
// are elastic.min_world_size when set (it may start that small), else world_size. Necessary, not
// sufficient: the planner may still need more (whole shard groups per node when they fit).
#ifndef SHARDLINE_COORDINATOR_PLACEMENT_PLACEABLE_H_
#define SHARDLINE_COORDINATOR_PLACEMENT_PLACEABLE_H_

#include <vector>

#include "absl/status/status.h"
#include "proto/coordinator.pb.h"
#include "proto/job_spec.pb.h"

namespace shardline::coordinator {

// OK when `spec` fits. Errors: FAILED_PRECONDITION naming world_size (or elastic.min_world_size),
// the slots it needs, what the cluster offers and the flag.
absl::Status CheckPlaceable(const JobSpec& spec, const std::vector<WorkerInfo>& workers,
                            int max_world_size);

}  // namespace shardline::coordinator

#endif  // SHARDLINE_COORDINATOR_PLACEMENT_PLACEABLE_H_
