#include "coordinator/placement/placeable.h"

#include "absl/strings/str_cat.h"
#include "coordinator/placement/scheduler.h"

namespace shardline::coordinator {

absl::Status CheckPlaceable(const JobSpec& spec, const std::vector<WorkerInfo>& workers,
                            int max_world_size) {
  if (max_world_size < 0) return absl::OkStatus();
  const bool elastic =
      spec.elastic().min_world_size() > 0 && spec.elastic().min_world_size() < spec.world_size();
  const int needed = elastic ? spec.elastic().min_world_size() : spec.world_size();
  const std::string what = elastic ? absl::StrCat("elastic.min_world_size ", needed)
                                   : absl::StrCat("world_size ", needed);
  if (max_world_size > 0) {
    if (needed <= max_world_size) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat(what, " is above this cluster's bound of ", max_world_size,
                     " ranks (--max_world_size): the job could never be placed"));
  }
  const Slot::Kind kind = SlotKindFor(spec);
  int alive = 0;
  int offering = 0;
  int slots = 0;
  for (const WorkerInfo& w : workers) {
    if (w.state() != WorkerInfo::ALIVE) continue;
    ++alive;
    int mine = 0;
    for (const Slot& s : w.slots()) mine += s.kind() == kind ? 1 : 0;
    slots += mine;
    offering += mine > 0 ? 1 : 0;
  }
  if (alive == 0 || needed <= slots) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      what, " needs ", needed, " ", Slot::Kind_Name(kind), " slots; the ", alive,
      " alive worker(s) offer ", slots, " in all (", offering,
      " with that kind), so the job could never be placed. Add workers first, lower ", what,
      elastic ? "" : " (or set elastic.min_world_size)",
      ", or start the coordinator with --max_world_size=N for a cluster that will grow"));
}

}  // namespace shardline::coordinator
