#include "coordinator/placement/scheduler.h"

#include <algorithm>
#include <deque>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "coordinator/placement/user_quota.h"

namespace shardline::coordinator {
namespace {

// Removes the slots `plan` uses from `caps`; nodes left without free slots are dropped (as
// WorkerRegistry::FreeCapacity leaves them out).
void TakeSlots(const Plan& plan, std::vector<NodeCapacity>* caps) {
  std::map<std::string, std::set<int32_t>> used;
  for (const RankPlan& r : plan.ranks) used[r.worker_id].insert(r.slot_index);
  for (NodeCapacity& c : *caps) {
    auto u = used.find(c.worker_id);
    if (u == used.end()) continue;
    c.free_slots.erase(std::remove_if(c.free_slots.begin(), c.free_slots.end(),
                                      [&](int32_t s) { return u->second.count(s) > 0; }),
                       c.free_slots.end());
  }
  caps->erase(std::remove_if(caps->begin(), caps->end(),
                             [](const NodeCapacity& c) { return c.free_slots.empty(); }),
              caps->end());
}

}  // namespace

Slot::Kind SlotKindFor(const JobSpec& spec) {
  return spec.device().kind() == DeviceSpec::CUDA ? Slot::CUDA : Slot::CPU;
}

namespace {

// `caps` with the slots `jobs` hold added: what is free once they stop.
std::vector<NodeCapacity> WithSlotsOf(std::vector<NodeCapacity> caps,
                                      const std::vector<const RunningJob*>& jobs) {
  for (const RunningJob* j : jobs) {
    for (const NodeCapacity& h : j->held) {
      auto it = std::find_if(caps.begin(), caps.end(),
                             [&](const NodeCapacity& c) { return c.worker_id == h.worker_id; });
      if (it == caps.end()) {
        caps.push_back(h);
        continue;
      }
      it->free_slots.insert(it->free_slots.end(), h.free_slots.begin(), h.free_slots.end());
      std::sort(it->free_slots.begin(), it->free_slots.end());
    }
  }
  return caps;
}

// Whether `spec` places at its full world size on `caps`.
bool PlacesOn(const JobSpec& spec, const std::vector<NodeCapacity>& caps) {
  absl::StatusOr<fsdp::ParallelLayout> layout = LayoutFor(spec, spec.world_size());
  return layout.ok() && PlanPlacement(*layout, caps).ok();
}

std::string JobList(const std::vector<const RunningJob*>& jobs) {
  std::vector<std::string> ids;
  for (const RunningJob* j : jobs) ids.push_back(j->job_id);
  return absl::StrJoin(ids, ", ");
}

// One scheduling round: the free slots left, the kinds blocked so far, the owners' running ranks
// and the decisions made.
struct Round {
  std::map<Slot::Kind, std::vector<NodeCapacity>> free;
  int64_t now_unix_ms = 0;
  RankQuota quota;
  std::vector<RunningJob> preemptible;
  std::set<Slot::Kind> blocked;
  std::vector<Decision> out;

  void Consider(const QueuedJob& job);
  // `job` does not fit on `caps`: fills `d` with a kPreempt, or a kWait for jobs already
  // preempting, and returns true; false when no preemption would place it.
  bool Preempt(const QueuedJob& job, const std::vector<NodeCapacity>& caps, Decision* d);
};

bool Round::Preempt(const QueuedJob& job, const std::vector<NodeCapacity>& caps, Decision* d) {
  const JobSpec& spec = *job.spec;
  if (const int max = quota.MaxFor(job.owner);
      max > 0 && quota.running[job.owner] + spec.world_size() > max) {
    return false;  // It would wait for its quota even with the slots.
  }
  std::vector<const RunningJob*> stopping, candidates;
  for (const RunningJob& r : preemptible) {
    if (r.kind != d->kind || r.priority >= spec.priority()) continue;
    (r.preempting ? stopping : candidates).push_back(&r);
  }
  if (!stopping.empty() && PlacesOn(spec, WithSlotsOf(caps, stopping))) {
    d->action = Decision::kWait;
    d->message = absl::StrCat("waiting for preempted job(s) ", JobList(stopping),
                              " to save a checkpoint and stop");
    return true;
  }
  std::sort(candidates.begin(), candidates.end(), [](const RunningJob* a, const RunningJob* b) {
    return a->priority != b->priority ? a->priority < b->priority
                                      : a->started_unix_ms > b->started_unix_ms;
  });
  auto places_with = [&](const std::vector<const RunningJob*>& victims) {
    std::vector<const RunningJob*> all = stopping;
    all.insert(all.end(), victims.begin(), victims.end());
    return PlacesOn(spec, WithSlotsOf(caps, all));
  };
  std::vector<const RunningJob*> victims;
  for (const RunningJob* c : candidates) {
    victims.push_back(c);
    if (places_with(victims)) break;
  }
  if (victims.empty() || !places_with(victims)) return false;
  // The fewest: a victim taken early (lowest priority) whose slots the later ones can spare
  // stays (the last one taken is needed: without it the job did not place).
  for (size_t i = 0; i + 1 < victims.size();) {
    std::vector<const RunningJob*> without = victims;
    without.erase(without.begin() + static_cast<std::ptrdiff_t>(i));
    if (places_with(without)) {
      victims = std::move(without);
    } else {
      ++i;
    }
  }
  d->action = Decision::kPreempt;
  for (const RunningJob* v : victims) d->victims.push_back(v->job_id);
  d->message = absl::StrCat("preempting lower-priority job(s) ", JobList(victims),
                            ": waiting for them to save a checkpoint and stop");
  return true;
}

void Round::Consider(const QueuedJob& job) {
  if (job.restart_not_before_unix_ms > now_unix_ms) return;  // in restart backoff
  const JobSpec& spec = *job.spec;
  Decision d;
  d.job_id = job.job_id;
  d.kind = SlotKindFor(spec);
  if (blocked.count(d.kind)) return;
  std::vector<NodeCapacity>& caps = free[d.kind];
  int32_t slots = 0;
  for (const NodeCapacity& c : caps) slots += static_cast<int32_t>(c.free_slots.size());
  // The first attempt runs at the full world size; a restart may shrink (elastic).
  int32_t w = job.attempt == 0 ? (slots >= spec.world_size() ? spec.world_size() : 0)
                               : ElasticWorldSize(spec, slots);
  if (w == 0) {
    blocked.insert(d.kind);
    if (Preempt(job, caps, &d)) {
      out.push_back(std::move(d));
      return;
    }
    d.action = Decision::kWait;
    d.message = absl::StrCat("waiting for ", spec.world_size(), " ", Slot::Kind_Name(d.kind),
                             " slots (", slots, " free on ", caps.size(), " live workers)");
    out.push_back(std::move(d));
    return;
  }
  int& running = quota.running[job.owner];
  const int max = quota.MaxFor(job.owner);
  if (max > 0 && running + w > max) {
    // Over the owner's bound: a restart shrinks to what is left of it when it can; otherwise
    // the job waits and, unlike a job waiting for slots, does not block its kind.
    const int32_t room = std::max(0, max - running);
    const int32_t shrunk = job.attempt == 0 ? 0 : ElasticWorldSize(spec, std::min(room, w));
    if (shrunk == 0) {
      d.action = Decision::kWait;
      d.quota = true;
      d.message = RunningRanksWaitMessage(job.owner, running, w, max, quota.SourceFor(job.owner));
      out.push_back(std::move(d));
      return;
    }
    w = shrunk;
  }
  auto layout = LayoutFor(spec, w);
  absl::StatusOr<Plan> plan = layout.ok() ? PlanPlacement(*layout, caps) : layout.status();
  if (!plan.ok()) {
    blocked.insert(d.kind);
    d.action = Decision::kUnplaced;
    d.error = plan.status();
  } else {
    TakeSlots(*plan, &caps);
    running += plan->world_size;
    d.action = Decision::kStart;
    d.plan = std::move(*plan);
  }
  out.push_back(std::move(d));
}

}  // namespace

int RankQuota::MaxFor(const std::string& user) const {
  auto it = own.find(user);
  return it != own.end() ? it->second.first : max_per_user;
}

std::string RankQuota::SourceFor(const std::string& user) const {
  auto it = own.find(user);
  return it != own.end() ? it->second.second : UserQuotas().running_ranks_source;
}

std::vector<Decision> Schedule(std::vector<QueuedJob> queue,
                               std::map<Slot::Kind, std::vector<NodeCapacity>> free,
                               int64_t now_unix_ms, RankQuota quota,
                               std::vector<RunningJob> preemptible) {
  std::sort(queue.begin(), queue.end(), [](const QueuedJob& a, const QueuedJob& b) {
    const int32_t pa = a.spec->priority(), pb = b.spec->priority();
    return pa != pb ? pa > pb : a.seq < b.seq;
  });
  Round round{std::move(free), now_unix_ms, std::move(quota), std::move(preemptible), {}, {}};
  // Higher priority first. Within one priority, fair between users: the next job is the oldest
  // of the owner who runs the fewest ranks now (counting this round's starts), so one user's
  // queue of jobs does not hold the slots from another's first one; ties by submission order.
  for (size_t i = 0; i < queue.size();) {
    size_t end = i;
    while (end < queue.size() && queue[end].spec->priority() == queue[i].spec->priority()) ++end;
    std::map<std::string, std::deque<const QueuedJob*>> by_owner;
    for (size_t k = i; k < end; ++k) by_owner[queue[k].owner].push_back(&queue[k]);
    while (!by_owner.empty()) {
      auto best = by_owner.begin();
      for (auto it = by_owner.begin(); it != by_owner.end(); ++it) {
        const int run = round.quota.running[it->first], best_run = round.quota.running[best->first];
        if (run < best_run ||
            (run == best_run && it->second.front()->seq < best->second.front()->seq)) {
          best = it;
        }
      }
      const QueuedJob* job = best->second.front();
      best->second.pop_front();
      if (best->second.empty()) by_owner.erase(best);
      round.Consider(*job);
    }
    i = end;
  }
  return std::move(round.out);
}

void RecordPlacement(const Plan& plan, JobStatus* status) {
  status->clear_placement();
  for (const RankPlan& r : plan.ranks) {
    RankPlacement* p = status->add_placement();
    p->set_rank(r.rank);
    p->set_worker_id(r.worker_id);
    p->set_node_name(r.node_name);
    p->set_slot_index(r.slot_index);
    p->set_local_rank(r.local_rank);
    p->set_shard_group(r.shard_group);
    p->set_replicate_group(r.replicate_group);
  }
}

std::string DescribePlan(const Plan& plan, int32_t requested_world_size) {
  std::set<std::string> nodes;
  std::set<int32_t> shard_groups;
  for (const RankPlan& r : plan.ranks) {
    nodes.insert(r.node_name);
    shard_groups.insert(r.shard_group);
  }
  std::string out = absl::StrCat(plan.world_size, " ranks on ", nodes.size(), " node(s), ",
                                 shard_groups.size(), " shard group(s) of ", plan.shard_degree);
  if (plan.world_size < requested_world_size) {
    absl::StrAppend(&out, "; elastic: world shrunk from ", requested_world_size);
  }
  return out;
}

}  // namespace shardline::coordinator
