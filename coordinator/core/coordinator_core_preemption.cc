// Preemption through a checkpoint: a PENDING job that cannot be placed takes the slots of
// running jobs of lower priority (the scheduler picks the fewest, lowest priority then youngest:
// placement/scheduler.h). Each is asked to save a checkpoint at its next step and stop
// (Assignment PREEMPT: the ranks agree on the step within it, trainer/train_loop.h), and once
// that checkpoint is committed its attempt ends and it is requeued (PREEMPTED, no restart
// counted); it resumes from that checkpoint when slots free, so no step is trained twice.
// Kubernetes' and Slurm's preemption kill (Slurm's REQUEUE restarts from nothing unless the job
// checkpoints itself); Determined's pauses a trial at a checkpoint, which is what this does.
//
// Only a job that can resume is a candidate: spec.scheduling.preemptible, checkpoint.dir set,
// fault_tolerance NONE (a REPLICA_GROUPS job's steps go through votes, not the all-reduce the
// ranks agree in). A preempted job that commits no checkpoint within --preempt_timeout_s (a hung
// or checkpoint-less rank) is stopped anyway and resumes from its last committed checkpoint.
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "coordinator/core/coordinator_core.h"
#include "coordinator/core/job_state_machine.h"
#include "coordinator/placement/scheduler.h"

namespace shardline::coordinator {

std::vector<RunningJob> CoordinatorCore::PreemptibleLocked() const {
  std::vector<RunningJob> out;
  for (const auto& [id, job] : jobs_.records()) {
    const JobStatus& st = job.status();
    const JobSpec& spec = st.spec();
    if (st.state() != RUNNING || !spec.scheduling().preemptible() ||
        spec.checkpoint().dir().empty() ||
        spec.fault_tolerance().mode() == FaultToleranceSpec::REPLICA_GROUPS) {
      continue;
    }
    RunningJob r;
    r.job_id = id;
    r.priority = spec.priority();
    r.kind = SlotKindFor(spec);
    r.started_unix_ms = st.started_unix_ms();
    r.preempting = !job.preempted_for().empty();
    std::map<std::string, NodeCapacity> held;
    for (const RankPlacement& p : st.placement()) {
      NodeCapacity& c = held[p.worker_id()];
      c.worker_id = p.worker_id();
      c.node_name = p.node_name();
      c.free_slots.push_back(p.slot_index());
    }
    for (auto& [worker, c] : held) {
      if (auto info = registry_.Get(worker); info.ok()) c.address = info->address();
      r.held.push_back(std::move(c));
    }
    out.push_back(std::move(r));
  }
  return out;
}

void CoordinatorCore::PreemptLocked(JobRecord& victim, const JobRecord& waiting) {
  JobStatus& st = *victim.mutable_status();
  if (st.state() != RUNNING || !victim.preempted_for().empty()) return;
  victim.set_preempted_for(waiting.status().job_id());
  victim.set_preempt_requested_unix_ms(absl::ToUnixMillis(clock_->Now()));
  const std::string reason = absl::StrCat(
      "job ", waiting.status().job_id(), " (priority ", waiting.status().spec().priority(),
      ") needs the slots of this job (priority ", st.spec().priority(),
      "): saving a checkpoint at the next step, then requeued to resume from it");
  JobStateMachine(&victim, clock_->Now()).Note("PREEMPTING", reason);
  std::set<std::string> workers;
  for (const RankPlacement& p : st.placement()) workers.insert(p.worker_id());
  for (const std::string& w : workers) outbox_.PushPreempt(w, st.job_id(), st.attempt());
  SL_LOG(INFO) << "job " << st.job_id() << " attempt " << st.attempt() << ": " << reason;
  jobs_.Changed(victim);
}

void CoordinatorCore::MaybeRequeuePreemptedLocked(JobRecord& job, int64_t step) {
  if (step <= 0 || job.preempt_saved_step() != step || job.status().state() != RUNNING) return;
  // Also without preempted_for (a PREEMPT this coordinator no longer remembers asking for): the
  // ranks saved for a preemption and wait to be stopped.
  const std::string for_job =
      job.preempted_for().empty() ? "a job of higher priority" : "job " + job.preempted_for();
  const std::string reason = absl::StrCat("preempted by ", for_job, ": checkpoint step ", step,
                                          " committed; requeued, resumes from it when slots free");
  EndAttemptLocked(job, /*send_stop=*/true);
  if (absl::Status s = JobStateMachine(&job, clock_->Now()).Requeue("PREEMPTED", reason); !s.ok()) {
    SL_LOG(ERROR) << s;
    return;
  }
  counters_.preemptions++;
  SL_LOG(INFO) << "job " << job.status().job_id() << ": " << reason;
  jobs_.Changed(job);
}

void CoordinatorCore::TickPreemptionsLocked() {
  const int64_t now = absl::ToUnixMillis(clock_->Now());
  const int64_t timeout = absl::ToInt64Milliseconds(options_.preempt_timeout);
  for (auto& [id, job] : jobs_.records()) {
    if (job.status().state() != RUNNING || job.preempted_for().empty() ||
        now - job.preempt_requested_unix_ms() < timeout) {
      continue;
    }
    const int64_t resume = checkpoints_.LatestCommitted(id);
    const std::string reason = absl::StrCat(
        "preempted by job ", job.preempted_for(), ": no checkpoint committed within ",
        absl::FormatDuration(options_.preempt_timeout), " (--preempt_timeout_s); stopped and ",
        "requeued, resumes from ",
        resume > 0 ? absl::StrCat("checkpoint step ", resume) : std::string("the start"),
        " (the steps after it are trained again)");
    EndAttemptLocked(job, /*send_stop=*/true);
    if (absl::Status s = JobStateMachine(&job, clock_->Now()).Requeue("PREEMPTED", reason);
        !s.ok()) {
      SL_LOG(ERROR) << s;
      continue;
    }
    counters_.preemptions++;
    SL_LOG(WARNING) << "job " << id << ": " << reason;
    jobs_.Changed(job);
  }
}

}  // namespace shardline::coordinator
