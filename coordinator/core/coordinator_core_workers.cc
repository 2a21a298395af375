// CoordinatorCore's side of the worker protocol: registration, heartbeats (rank statuses applied,
// draining slots released), the assignment stream, and the periodic reaping of silent workers.
// The class and its lock are coordinator_core.h's; the job lifecycle these calls drive is in
// coordinator_core.cc.
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/secrets.h"
#include "common/status_macros.h"
#include "coordinator/core/coordinator_core.h"
#include "coordinator/core/job_state_machine.h"

namespace shardline::coordinator {

void CoordinatorCore::PersistWorker(const std::string& worker_id) {
  auto info = registry_.Get(worker_id);
  if (info.ok()) writer_->PutWorker(*info);  // queued; a failure makes the writer read-only
}

absl::StatusOr<RegisterWorkerResponse> CoordinatorCore::RegisterWorker(
    const RegisterWorkerRequest& req, std::optional<absl::string_view> presented) {
  const std::string credential = RandomSecret();
  const std::string digest = Sha256Hex(credential);
  ASSIGN_OR_RETURN(const std::string id, registry_.Register(req, digest, presented));
  PersistWorker(id);
  WorkerCredentialRecord record;
  record.set_worker_id(id);
  record.set_credential_sha256(digest);
  writer_->PutWorkerCredential(record);
  SL_LOG(INFO) << "worker " << id << " (" << req.node_name() << ", " << req.slots_size()
               << " slots) registered";
  RegisterWorkerResponse resp;
  resp.set_worker_id(id);
  resp.set_worker_credential(credential);
  resp.set_heartbeat_interval_ms(
      static_cast<int32_t>(absl::ToInt64Milliseconds(options_.heartbeat_interval)));
  resp.set_heartbeat_timeout_ms(
      static_cast<int32_t>(absl::ToInt64Milliseconds(options_.heartbeat_timeout)));
  absl::MutexLock lock(&mu_);
  ScheduleLocked();
  return resp;
}

absl::StatusOr<HeartbeatResponse> CoordinatorCore::Heartbeat(const HeartbeatRequest& req) {
  HeartbeatResponse resp;
  const std::string& worker = req.worker_id();
  if (!registry_.Heartbeat(worker).ok()) {
    resp.set_reregister(true);
    return resp;
  }
  absl::MutexLock lock(&mu_);
  if (req.ranks_size() == 0 && !tracker_.HasRunningRanks(worker) && !draining_.Holds(worker)) {
    return resp;  // common at scale
  }
  bool changed = false;
  RankTracker::RankKeys reported;
  for (const RankStatus& rs : req.ranks()) {
    const RankTracker::Observation seen = tracker_.Observe(worker, rs);
    changed |= rs.state() == RankStatus::EXITED;
    if (seen.current) reported.insert({rs.job_id(), rs.rank()});
    if (auto job = jobs_.Find(rs.job_id()); seen.exited_ok && job.ok()) {
      RankSucceededLocked(**job, rs.rank());
    }
    if (seen.failed) ApplyFailuresLocked({*seen.failed});
    if (seen.stop) {
      outbox_.PushStop(worker, rs.job_id(), rs.attempt());
      SL_LOG(INFO) << "worker " << worker << " still runs rank " << rs.rank() << " of "
                   << rs.job_id() << " attempt " << rs.attempt()
                   << ", which is over, and was sent no STOP of it on this stream: STOP";
    }
  }
  const std::vector<RankFailure> lost = tracker_.LostRanks(worker, reported);
  ApplyFailuresLocked(lost);
  changed |= draining_.ReleaseExited(worker, req.ranks(), &registry_);
  if (changed || !lost.empty()) ScheduleLocked();
  return resp;
}

void CoordinatorCore::NoteDrainingRanksLostLocked(const std::string& worker,
                                                  const std::string& node) {
  // A job still waiting to restart learns why its world may shrink: the stopped ranks on that
  // worker are gone with it.
  for (const DrainingSlots::LostRanks& lost : draining_.ForgetWorker(worker)) {
    auto job = jobs_.Find(lost.job_id);
    if (!job.ok() || IsTerminal((*job)->status().state())) continue;
    JobStateMachine(*job, clock_->Now())
        .Note("WORKER_LOST",
              absl::StrCat("worker ", worker, " (node ", node, ") missed heartbeats for ",
                           absl::FormatDuration(options_.heartbeat_timeout), "; stopped ranks [",
                           absl::StrJoin(lost.ranks, ", "), "] of attempt ", lost.attempt,
                           " lost with it"));
    jobs_.Changed(**job);
  }
}

absl::StatusOr<int64_t> CoordinatorCore::OpenAssignmentStream(const std::string& worker_id) {
  ASSIGN_OR_RETURN(const WorkerInfo info, registry_.Get(worker_id));
  if (info.state() != WorkerInfo::ALIVE) {
    return absl::FailedPreconditionError(
        absl::StrCat("worker ", worker_id, " was declared dead; register again"));
  }
  absl::MutexLock lock(&mu_);
  tracker_.StreamOpened(worker_id);
  // Only the STARTs of running attempts the worker has not acknowledged (see the header).
  std::vector<Assignment> resend;
  for (const auto& [id, job] : jobs_.records()) {
    if (job.status().state() != RUNNING) continue;
    for (auto& [worker, start] : outbox_.Starts(job, StartInfoLocked(job), worker_id)) {
      // (A stopped rank of a lost replica group is not started again.)
      if (!tracker_.IsAcked(id, start.rank()) && !tracker_.IsStopped(id, start.rank())) {
        resend.push_back(std::move(start));
      }
    }
    // A PREEMPT may have been lost with the old stream; a second one is harmless (the ranks
    // are already saving or waiting).
    if (!job.preempted_for().empty()) {
      for (const RankPlacement& p : job.status().placement()) {
        if (p.worker_id() != worker_id) continue;
        Assignment preempt;
        preempt.set_action(Assignment::PREEMPT);
        preempt.set_job_id(id);
        preempt.set_attempt(job.status().attempt());
        resend.push_back(std::move(preempt));
        break;
      }
    }
  }
  return outbox_.Open(worker_id, std::move(resend));
}

absl::StatusOr<bool> CoordinatorCore::NextAssignment(const std::string& worker_id,
                                                     int64_t generation, absl::Duration wait,
                                                     Assignment* out) {
  absl::MutexLock lock(&mu_);
  auto running = [this](const std::string& job, int32_t attempt) {
    mu_.AssertHeld();  // NextLocked calls it with mu_ held (it releases mu_ only to wait)
    return tracker_.IsRunning(job, attempt);
  };
  return outbox_.NextLocked(&mu_, worker_id, generation, wait, running, out);
}

std::vector<WorkerInfo> CoordinatorCore::ListWorkers() const { return registry_.List(); }

void CoordinatorCore::Tick() {
  const std::vector<std::string> dead = registry_.ReapDead();
  if (const absl::Duration blind = registry_.blind_for(); blind > absl::ZeroDuration()) {
    SL_LOG(WARNING) << "the coordinator did not tick for " << absl::FormatDuration(blind)
                    << " (stopped, paused or starved): every alive worker gets "
                    << absl::FormatDuration(options_.heartbeat_timeout)
                    << " from now to heartbeat again before it is declared dead";
  }
  for (const std::string& w : dead) PersistWorker(w);
  {
    absl::MutexLock lock(&mu_);
    for (const std::string& worker_id : dead) {
      outbox_.Drop(worker_id);  // its stream ends (ABORTED) at its next look
      auto info = registry_.Get(worker_id);
      const std::string node = info.ok() ? info->node_name() : "?";
      SL_LOG(WARNING) << "worker " << worker_id << " (" << node << ") missed heartbeats for "
                      << absl::FormatDuration(options_.heartbeat_timeout) << "; declared dead";
      NoteDrainingRanksLostLocked(worker_id, node);
      ApplyFailuresLocked(tracker_.WorkerDied(worker_id, node, options_.heartbeat_timeout));
    }
    // Ranks whose START was never acknowledged in time.
    ApplyFailuresLocked(tracker_.StartTimeouts(clock_->Now(), options_.rank_start_timeout));
    TickQuorumsLocked();
    TickPreemptionsLocked();
    ScheduleLocked();
    CollectFinishedJobsLocked();
    // A job that just ended gets its series written at once, not a flush interval later: a
    // coordinator killed meanwhile would lose its last points for good (reports of an ended job
    // are refused, so no daemon can resend them). A minute covers a tick that came late.
    for (const std::string& id :
         jobs_.FinishedSince(absl::ToUnixMillis(clock_->Now() - absl::Minutes(1)))) {
      training_.Ended(id);
    }
    jobs_.FlushDeferred(clock_->Now(), options_.metrics_flush_interval, /*all=*/false);
  }
  // Outside mu_: copying a series for its write must not stall heartbeats.
  FlushTrainingMetrics(/*all=*/false);
}

}  // namespace shardline::coordinator
