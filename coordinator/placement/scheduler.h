// Scheduler: which queued jobs start now and where, as a pure function of the queue and the free
// slots.
//
// Queue order: higher spec.priority first, then submission order (seq), fairly between users
// of one priority. Strict per device kind:
// when the first eligible job of a kind does not fit, later jobs of that kind wait too, so a
// large job is not starved by a stream of small ones. A job in restart backoff is skipped without
// blocking its kind. Gang scheduling: a job's first attempt gets all spec.world_size ranks or
// none; a restart may shrink to ElasticWorldSize (planner.h). Ranks are placed by PlanPlacement
// with the job's ParallelLayout at that world size; a placed job's slots are taken from the free
// slots the later jobs see.
//
// Thread safety: pure function.
#ifndef SHARDLINE_COORDINATOR_PLACEMENT_SCHEDULER_H_
#define SHARDLINE_COORDINATOR_PLACEMENT_SCHEDULER_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "coordinator/placement/planner.h"
#include "proto/coordinator.pb.h"
#include "proto/job_spec.pb.h"

namespace shardline::coordinator {

// The slot kind a job runs on (CUDA for device.kind CUDA, else CPU).
Slot::Kind SlotKindFor(const JobSpec& spec);

// One PENDING job.
struct QueuedJob {
  std::string job_id;
  const JobSpec* spec = nullptr;  // must outlive the Schedule call
  int32_t attempt = 0;            // attempts so far (0: never started)
  int64_t seq = 0;                // submission order
  int64_t restart_not_before_unix_ms = 0;
  std::string owner;  // JobStatus.owner: whose running-rank bound the job counts against
};

// The per-user running-rank bound (--max_running_ranks_per_user; <= 0: none) and the ranks each
// user's RUNNING attempts hold now. A job that would take its owner past the bound waits with a
// message naming it, without blocking later jobs of its kind (other users' jobs must not queue
// behind one user's quota); a restart may shrink (elastic) to fit it.
struct RankQuota {
  int max_per_user = 0;
  std::map<std::string, int> running;  // by user (every user's, bound or not: fair ordering)
  // Users with their own bound (the users file's max_running_ranks): bound and its source.
  std::map<std::string, std::pair<int, std::string>> own;
  int MaxFor(const std::string& user) const;
  std::string SourceFor(const std::string& user) const;
};

// One RUNNING attempt a waiting job of higher priority may preempt. The caller lists only the
// attempts that can be (spec.scheduling.preemptible, checkpoint.dir set, fault_tolerance NONE):
// they save a checkpoint at their next step and stop, and are requeued.
struct RunningJob {
  std::string job_id;
  int32_t priority = 0;
  Slot::Kind kind = Slot::CPU;
  int64_t started_unix_ms = 0;     // its attempt's start: of one priority, the youngest goes first
  std::vector<NodeCapacity> held;  // its slots, per worker
  bool preempting = false;         // already asked to save and stop (its slots are coming free)
};

// What to do with one queued job, in the order they must be applied.
struct Decision {
  enum Action {
    kStart,     // start an attempt with `plan`
    kWait,      // not enough slots, or the owner's rank quota: `message` says so (the job's
                // status message; `quota` says which)
    kUnplaced,  // placement failed (`error`); the kind is blocked for this round
    kPreempt    // not enough free slots, but enough once `victims` stop: ask them to save and
                // stop (the job waits meanwhile, `message` says for whom; the kind is blocked)
  };
  Action action = kWait;
  std::string job_id;
  Slot::Kind kind = Slot::CPU;
  Plan plan;
  std::string message;
  bool quota = false;  // a kWait for the owner's running-rank bound (RankQuota)
  absl::Status error;
  std::vector<std::string> victims;  // kPreempt: the running jobs to preempt, in order
};

// Decisions for `queue` (any order) given the free slots of live workers per kind (as
// WorkerRegistry::FreeCapacity returns them) at `now_unix_ms`. If the caller fails to apply a
// kStart, it must skip the later decisions of that kind (they assumed those slots were taken).
//
// Preemption: when the first job of a kind that does not fit has a higher priority than some of
// `preemptible`, it waits for those already preempting if their slots would place it (at its
// spec's world size); otherwise it preempts the fewest more that would: candidates in order of
// lowest priority, then youngest, taken until the job places, then each dropped again whose
// slots the rest can spare (kPreempt). A job over its owner's rank quota preempts nothing.
std::vector<Decision> Schedule(std::vector<QueuedJob> queue,
                               std::map<Slot::Kind, std::vector<NodeCapacity>> free,
                               int64_t now_unix_ms, RankQuota quota = {},
                               std::vector<RunningJob> preemptible = {});

// A started plan as the job's status shows it: replaces `status`'s placement with one entry per
// rank (worker, node, slot, local rank, shard and replicate group).
void RecordPlacement(const Plan& plan, JobStatus* status);
// "4 ranks on 2 node(s), 2 shard group(s) of 2", plus "; elastic: world shrunk from 8" when the
// plan is smaller than the `requested_world_size`: the reason of the job's SCHEDULED event.
std::string DescribePlan(const Plan& plan, int32_t requested_world_size);

}  // namespace shardline::coordinator

#endif  // SHARDLINE_COORDINATOR_PLACEMENT_SCHEDULER_H_
