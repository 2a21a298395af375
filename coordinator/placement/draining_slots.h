// DrainingSlots: the slots of stopped ranks that may still be running.
//
// A STOP is SIGTERM, then SIGKILL after the grace period: the rank may hold its device (and finish
// a checkpoint save) for the whole grace, longer than a restart backoff. So when an attempt ends
// with a STOP, the slot of every rank its worker has reported stays reserved here until the worker
// reports the rank EXITED, stops listing it, or is declared dead; a job whose stopped ranks are
// still alive waits before it restarts. Not persisted: after a coordinator restart these slots are
// free again (the ranks' daemons kill them when the new coordinator's heartbeats name no such
// attempt).
//
// Thread safety: none; the coordinator calls it under its own lock.
#ifndef SHARDLINE_COORDINATOR_PLACEMENT_DRAINING_SLOTS_H_
#define SHARDLINE_COORDINATOR_PLACEMENT_DRAINING_SLOTS_H_

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "coordinator/placement/worker_registry.h"
#include "proto/coordinator.pb.h"

namespace shardline::coordinator {

class DrainingSlots {
 public:
  // Rank `rank` of `job_id` attempt `attempt` was stopped on `worker`, where it holds `slot`
  // (reserved in the registry under the attempt's namespace "<job id>/<attempt>").
  // `generation`: the stopped process's (fault_tolerance REPLICA_GROUPS may start a newer one of
  // the same rank meanwhile, which does not keep this slot held).
  void Hold(const std::string& worker, const std::string& job_id, int32_t attempt, int32_t rank,
            int32_t slot, int32_t generation = 0);

  // Whether `worker` has any held slot.
  bool Holds(const std::string& worker) const { return held_.count(worker) > 0; }

  // After a heartbeat of `worker` listing `ranks`: releases (in `registry`) the held slots whose
  // rank (that generation or an older one) is reported EXITED or no longer listed. Returns whether
  // any slot was released.
  bool ReleaseExited(const std::string& worker,
                     const google::protobuf::RepeatedPtrField<RankStatus>& ranks,
                     WorkerRegistry* registry);

  // The ranks a dead worker held, grouped by attempt. The registry already dropped the dead
  // worker's reservations: this only forgets them.
  struct LostRanks {
    std::string job_id;
    int32_t attempt = 0;
    std::vector<int32_t> ranks;  // ascending
  };
  std::vector<LostRanks> ForgetWorker(const std::string& worker);

  // Number of stopped ranks still holding a slot, by job id.
  std::map<std::string, int> CountByJob() const;

 private:
  using Key = std::tuple<std::string, int32_t, int32_t>;  // (job id, attempt, rank)
  struct Held {
    int32_t slot = 0;
    int32_t generation = 0;
  };
  std::map<std::string, std::map<Key, Held>> held_;  // worker id -> key -> slot, generation
};

}  // namespace shardline::coordinator

#endif  // SHARDLINE_COORDINATOR_PLACEMENT_DRAINING_SLOTS_H_
