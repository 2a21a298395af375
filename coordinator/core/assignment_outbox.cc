#include "coordinator/core/assignment_outbox.h"

#include "absl/strings/str_cat.h"

namespace shardline::coordinator {

std::vector<std::pair<std::string, Assignment>> AssignmentOutbox::Starts(
    const JobRecord& rec, const AttemptStartInfo& info, const std::string& worker_id) const {
  const JobStatus& st = rec.status();
  std::map<std::string, int32_t> local_world;  // this attempt's ranks per worker
  for (const RankPlacement& p : st.placement()) local_world[p.worker_id()]++;
  std::vector<std::pair<std::string, Assignment>> out;
  for (const RankPlacement& p : st.placement()) {
    if (!worker_id.empty() && p.worker_id() != worker_id) continue;
    Assignment a;
    a.set_action(Assignment::START);
    a.set_job_id(st.job_id());
    a.set_attempt(st.attempt());
    a.set_rank(p.rank());
    a.set_world_size(st.world_size());
    a.set_local_rank(p.local_rank());
    a.set_local_world_size(local_world[p.worker_id()]);
    a.set_slot_index(p.slot_index());
    a.set_rendezvous_namespace(info.rendezvous_namespace);
    a.set_rendezvous_secret(rec.rendezvous_secret());
    *a.mutable_spec() = st.spec();
    a.set_master_addr(info.master_addr);
    a.set_resume_step(info.resume_step);
    a.set_resume_from_job_id(info.resume_from_job_id);
    a.set_grace_period_s(grace_period_s_);
    a.set_generation(p.generation());
    out.emplace_back(p.worker_id(), std::move(a));
  }
  return out;
}

bool AssignmentOutbox::StartQueued(const std::string& worker_id, const std::string& job_id,
                                   int32_t attempt, int32_t rank) const {
  auto q = queues_.find(worker_id);
  if (q == queues_.end()) return false;
  for (const Assignment& a : q->second.assignments) {
    if (a.action() == Assignment::START && a.job_id() == job_id && a.attempt() == attempt &&
        a.rank() == rank) {
      return true;
    }
  }
  return false;
}

void AssignmentOutbox::PushStarts(const JobRecord& rec, const AttemptStartInfo& info) {
  for (auto& [worker_id, a] : Starts(rec, info, "")) Push(worker_id, std::move(a));
}

void AssignmentOutbox::PushStop(const std::string& worker_id, const std::string& job_id,
                                int32_t attempt) {
  Assignment stop;
  stop.set_action(Assignment::STOP);
  stop.set_job_id(job_id);
  stop.set_attempt(attempt);
  stop.set_grace_period_s(grace_period_s_);
  Push(worker_id, std::move(stop));
}

void AssignmentOutbox::PushPreempt(const std::string& worker_id, const std::string& job_id,
                                   int32_t attempt) {
  Assignment preempt;
  preempt.set_action(Assignment::PREEMPT);
  preempt.set_job_id(job_id);
  preempt.set_attempt(attempt);
  Push(worker_id, std::move(preempt));
}

void AssignmentOutbox::PushStart(const JobRecord& rec, const AttemptStartInfo& info, int32_t rank) {
  for (auto& [worker_id, a] : Starts(rec, info, "")) {
    if (a.rank() == rank) Push(worker_id, std::move(a));
  }
}

void AssignmentOutbox::PushStopRank(const std::string& worker_id, const std::string& job_id,
                                    int32_t attempt, int32_t rank, int32_t generation) {
  Assignment stop;
  stop.set_action(Assignment::STOP_RANK);
  stop.set_job_id(job_id);
  stop.set_attempt(attempt);
  stop.set_rank(rank);
  stop.set_generation(generation);
  stop.set_grace_period_s(grace_period_s_);
  Push(worker_id, std::move(stop));
}

void AssignmentOutbox::Push(const std::string& worker_id, Assignment a) {
  queues_[worker_id].assignments.push_back(std::move(a));
  feed_->WorkerChanged(worker_id);
}

int64_t AssignmentOutbox::Open(const std::string& worker_id, std::vector<Assignment> resend) {
  Queue& q = queues_[worker_id];
  q.generation++;
  q.assignments.assign(std::make_move_iterator(resend.begin()),
                       std::make_move_iterator(resend.end()));
  feed_->WorkerChanged(worker_id);  // an older stream of this worker ends
  return q.generation;
}

void AssignmentOutbox::Drop(const std::string& worker_id) {
  queues_.erase(worker_id);
  feed_->WorkerChanged(worker_id);
}

absl::StatusOr<bool> AssignmentOutbox::NextLocked(
    absl::Mutex* mu, const std::string& worker_id, int64_t generation, absl::Duration wait,
    const std::function<bool(const std::string& job_id, int32_t attempt)>& still_running,
    Assignment* out) {
  const absl::Time deadline = absl::Now() + wait;
  while (true) {
    if (feed_->shut_down()) return absl::UnavailableError("coordinator is shutting down");
    auto it = queues_.find(worker_id);
    if (it == queues_.end() || it->second.generation != generation) {
      return absl::AbortedError(
          absl::StrCat("assignment stream of worker ", worker_id, " superseded by a newer one"));
    }
    std::deque<Assignment>& q = it->second.assignments;
    while (!q.empty()) {
      *out = std::move(q.front());
      q.pop_front();
      // A START of an attempt that ended meanwhile is not delivered.
      if (out->action() != Assignment::START || still_running(out->job_id(), out->attempt())) {
        return true;
      }
    }
    if (feed_->WaitLocked(mu, deadline)) return false;
  }
}

}  // namespace shardline::coordinator
