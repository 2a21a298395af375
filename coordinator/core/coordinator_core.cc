#include "coordinator/core/coordinator_core.h"

#include <algorithm>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/secrets.h"
#include "common/status_macros.h"
#include "coordinator/checkpoints/manifest_fetch.h"
#include "coordinator/core/job_state_machine.h"
#include "coordinator/core/rank_reports.h"
#include "coordinator/placement/placeable.h"
#include "coordinator/placement/scheduler.h"
#include "spec/validate.h"

namespace shardline::coordinator {
namespace {

// Rendezvous values go to the state store's queue (a coordinator with --state_dir), so a
// restarted coordinator reloads them (Load).
RendezvousStore::Journal RendezvousJournal(StateWriter* writer) {
  if (!writer->store()) return {};
  return {[writer](const std::string& ns, const std::string& key, const std::string& value) {
            writer->PutRendezvousValue(ns, key, value);
          },
          [writer](const std::string& ns) { writer->DeleteRendezvousNamespace(ns); }};
}

}  // namespace

CoordinatorCore::CoordinatorCore(const CoreOptions& options, std::unique_ptr<StateStore> store)
    : options_(options),
      clock_(options.clock),
      writer_(std::make_unique<StateWriter>(std::move(store), options.state_retry_interval)),
      registry_(options.clock, options.heartbeat_timeout, options.blind_gap),
      rendezvous_(options.rendezvous_limits, RendezvousJournal(writer_.get())),
      training_(options.metrics_series_capacity),
      logs_(options.logs),
      jobs_(writer_.get(), &feed_, options.max_events_per_job),
      outbox_(&feed_, options.stop_grace_period_s) {
  absl::MutexLock lock(&mu_);
  jobs_.SetBeforeEndWrite([this](const std::string& job_id) { WriteSeriesOfEndedJob(job_id); });
}

CoordinatorCore::~CoordinatorCore() {
  Shutdown();
  {
    absl::MutexLock lock(&mu_);
    jobs_.FlushDeferred(clock_->Now(), options_.metrics_flush_interval, /*all=*/true);
  }
  FlushTrainingMetrics(/*all=*/true);  // the writer tries its queue once more as it stops
}

absl::StatusOr<std::unique_ptr<CoordinatorCore>> CoordinatorCore::Create(
    const CoreOptions& options) {
  RETURN_IF_ERROR(ValidateCoreOptions(options));
  std::unique_ptr<StateStore> store;
  if (!options.state_dir.empty()) {
    ASSIGN_OR_RETURN(store, StateStore::Open(options.state_dir));
  }
  std::unique_ptr<CoordinatorCore> core(new CoordinatorCore(options, std::move(store)));
  if (core->writer_->store()) RETURN_IF_ERROR(core->Load());
  return core;
}

std::string CoordinatorCore::Namespace(const JobRecord& rec) {
  return absl::StrCat(rec.status().job_id(), "/", rec.status().attempt());
}

absl::Status CoordinatorCore::Load() {
  StateStore* store = writer_->store();
  ASSIGN_OR_RETURN(const std::vector<WorkerInfo> workers, store->LoadWorkers());
  for (const WorkerInfo& w : workers) registry_.Restore(w);
  ASSIGN_OR_RETURN(const std::vector<WorkerCredentialRecord> credentials,
                   store->LoadWorkerCredentials());
  for (const WorkerCredentialRecord& c : credentials) {
    registry_.RestoreCredential(c.worker_id(), c.credential_sha256());
  }
  ASSIGN_OR_RETURN(const std::vector<CheckpointRecord> checkpoints, store->LoadCheckpoints());
  ASSIGN_OR_RETURN(const std::vector<JobRecord> jobs, store->LoadJobs());
  ASSIGN_OR_RETURN(const std::vector<JobMetricsRecord> series, store->LoadJobMetrics());
  for (const JobMetricsRecord& m : series) training_.Restore(m);
  ASSIGN_OR_RETURN(const std::vector<RendezvousRow> rendezvous_rows, store->LoadRendezvous());
  std::map<std::string, std::vector<const RendezvousRow*>> rendezvous_values;  // by namespace
  for (const RendezvousRow& r : rendezvous_rows) rendezvous_values[r.ns].push_back(&r);
  absl::MutexLock lock(&mu_);
  for (const CheckpointRecord& c : checkpoints) checkpoints_.Restore(c);
  int running = 0;
  for (const JobRecord& rec : jobs) {
    JobRecord& job = jobs_.Restore(rec);
    if (rec.status().state() != RUNNING) continue;
    ++running;
    // The attempt goes on where its workers come back: keep its slots and rendezvous secret.
    bool all_reserved = true;
    for (const RankPlacement& p : rec.status().placement()) {
      all_reserved &= registry_.Reserve(p.worker_id(), p.slot_index(), Namespace(rec)).ok();
    }
    rendezvous_.Open(Namespace(rec), rec.rendezvous_secret());
    // Ranks still bootstrapping (or rebuilding their communicators for a new membership epoch)
    // find the keys they were waiting for.
    if (auto it = rendezvous_values.find(Namespace(rec)); it != rendezvous_values.end()) {
      for (const RendezvousRow* r : it->second) {
        if (absl::Status s = rendezvous_.Restore(r->ns, r->key, r->value); !s.ok()) {
          SL_LOG(WARNING) << "rendezvous value " << r->key << " of " << r->ns
                          << " not reloaded: " << s;
        }
      }
    }
    attempt_credentials_.Add(rec.rendezvous_secret(),
                             {rec.status().job_id(), rec.status().attempt(), Namespace(rec)});
    tracker_.RestoreAttempt(rec.status());
    StartQuorumLocked(job, /*restored=*/true);
    JobStateMachine(&job, clock_->Now())
        .Note("COORDINATOR_RESTARTED",
              "coordinator restarted; waiting for the attempt's workers to heartbeat again");
    if (!all_reserved) {
      FailAttemptLocked(job, "WORKER_LOST",
                        "a worker of this attempt was already dead when the coordinator restarted");
    } else {
      jobs_.Changed(job);
    }
  }
  // Values of namespaces no running attempt holds (an attempt that ended while its values'
  // delete was still queued when the coordinator stopped) are deleted.
  for (const auto& [ns, values] : rendezvous_values) {
    if (!rendezvous_.IsOpen(ns)) writer_->DeleteRendezvousNamespace(ns);
  }
  SL_LOG(INFO) << "loaded state from " << options_.state_dir << ": " << jobs.size() << " jobs ("
               << running << " running), " << workers.size() << " workers, " << checkpoints.size()
               << " checkpoint records, " << rendezvous_rows.size() << " rendezvous values";
  return absl::OkStatus();
}

void CoordinatorCore::RankSucceededLocked(JobRecord& job, int32_t rank) {
  const auto& done = job.succeeded_ranks();
  if (std::find(done.begin(), done.end(), rank) != done.end()) return;
  job.add_succeeded_ranks(rank);
  if (quorums_.count(job.status().job_id())) {
    MaybeSucceedReplicaGroupsLocked(job);
    jobs_.Changed(job);
    return;
  }
  const JobStatus& st = job.status();
  if (job.succeeded_ranks_size() == st.world_size()) {
    EndAttemptLocked(job, /*send_stop=*/false);
    (void)JobStateMachine(&job, clock_->Now())
        .Succeed(absl::StrCat("all ", st.world_size(), " ranks of attempt ", st.attempt(),
                              " exited with code 0"));
    SL_LOG(INFO) << "job " << st.job_id() << " succeeded";
  }
  jobs_.Changed(job);
}

// ------------------------------------------------------------------------------- lifecycle

void CoordinatorCore::ScheduleLocked() {
  if (feed_.shut_down()) return;
  // Replacement replica groups of running jobs first: they keep a job training at full width.
  PlaceReplacementsLocked();
  std::vector<QueuedJob> queue;
  std::map<Slot::Kind, std::vector<NodeCapacity>> free;
  // A job whose previous attempt still has stopped ranks alive waits for them (they hold their
  // slots, maybe a checkpoint save in flight): restarting around them would shrink an elastic
  // job for nothing. Their worker's death ends the wait too.
  const std::map<std::string, int> stopping = draining_.CountByJob();
  for (auto& [id, job] : jobs_.records()) {
    const JobStatus& st = job.status();
    if (st.state() != PENDING) continue;
    if (auto it = stopping.find(id); it != stopping.end()) {
      const std::string message =
          absl::StrCat("waiting for ", it->second, " stopped rank(s) of attempt ", st.attempt(),
                       " to exit (SIGKILL after the grace period)");
      if (st.message() != message) {
        job.mutable_status()->set_message(message);
        jobs_.Changed(job);
      }
      continue;
    }
    queue.push_back(
        {id, &st.spec(), st.attempt(), job.seq(), job.restart_not_before_unix_ms(), st.owner()});
    const Slot::Kind kind = SlotKindFor(st.spec());
    if (!free.count(kind)) free[kind] = registry_.FreeCapacity(kind);
  }
  std::set<Slot::Kind> failed;  // a start failed: later decisions of the kind assumed its slots
  for (const Decision& d :
       Schedule(std::move(queue), std::move(free), absl::ToUnixMillis(clock_->Now()),
                RankQuotaLocked(), PreemptibleLocked())) {
    if (failed.count(d.kind)) continue;
    JobRecord& job = jobs_.records().at(d.job_id);
    if (d.action == Decision::kPreempt) {
      for (const std::string& v : d.victims) {
        if (auto victim = jobs_.Find(v); victim.ok()) PreemptLocked(**victim, job);
      }
    }
    if (d.action == Decision::kWait || d.action == Decision::kPreempt) {
      if (job.status().message() != d.message) {
        // A quota wait is the user's to act on (cancel another job): it goes into the events
        // too, once per change of the message.
        if (d.quota) JobStateMachine(&job, clock_->Now()).Note("QUOTA_WAIT", d.message);
        job.mutable_status()->set_message(d.message);
        jobs_.Changed(job);
      }
    } else if (d.action == Decision::kUnplaced) {
      SL_LOG(WARNING) << "cannot place job " << d.job_id << ": " << d.error;
    } else if (absl::Status s = StartAttemptLocked(job, d.plan); !s.ok()) {
      SL_LOG(ERROR) << "cannot start job " << d.job_id << ": " << s;
      failed.insert(d.kind);
    }
  }
}

absl::Status CoordinatorCore::StartAttemptLocked(JobRecord& job, const Plan& plan) {
  const std::string job_id = job.status().job_id();
  // The reservations' holder is the new attempt's namespace (Start below numbers it).
  const std::string holder = absl::StrCat(job_id, "/", job.status().attempt() + 1);
  RETURN_IF_ERROR(registry_.ReservePlan(plan, holder));
  const JobSpec& spec = job.status().spec();
  std::string reason = DescribePlan(plan, spec.world_size());
  const int64_t resume = checkpoints_.LatestCommitted(job_id);
  if (resume > 0) absl::StrAppend(&reason, "; resuming from checkpoint step ", resume);
  if (absl::Status s = JobStateMachine(&job, clock_->Now()).Start(plan.world_size, reason);
      !s.ok()) {
    registry_.ReleaseJob(holder);
    return s;
  }
  JobStatus& st = *job.mutable_status();
  job.set_shard_degree(plan.shard_degree);
  job.set_rendezvous_secret(RandomSecret());
  RecordPlacement(plan, &st);
  st.clear_per_rank_peak_memory_bytes();
  st.mutable_per_rank_peak_memory_bytes()->Resize(plan.world_size, 0);
  st.set_total_steps(spec.train().steps());
  rendezvous_.Open(Namespace(job), job.rendezvous_secret());
  attempt_credentials_.Add(job.rendezvous_secret(), {job_id, st.attempt(), Namespace(job)});
  tracker_.StartAttempt(st);
  StartQuorumLocked(job, /*restored=*/false);
  outbox_.PushStarts(job, StartInfoLocked(job));
  SL_LOG(INFO) << "job " << job_id << " attempt " << st.attempt() << ": " << reason;
  counters_.attempts_started++;
  jobs_.Changed(job);
  return absl::OkStatus();
}

AttemptStartInfo CoordinatorCore::StartInfoLocked(const JobRecord& job) const {
  const JobStatus& st = job.status();
  AttemptStartInfo info;
  info.rendezvous_namespace = Namespace(job);
  if (st.placement_size() > 0) {
    auto rank0 = registry_.Get(st.placement(0).worker_id());
    if (rank0.ok()) info.master_addr = rank0->address();
  }
  info.resume_step = checkpoints_.ResumeStep(st);
  // The trainer checks the checkpoint it continues against the job approved at submit.
  if (const std::string& from = st.spec().checkpoint().resume_from(); !from.empty()) {
    info.resume_from_job_id = checkpoints_.JobOfCommittedCheckpoint(from);
  }
  return info;
}

void CoordinatorCore::EndAttemptLocked(JobRecord& job, bool send_stop) {
  const JobStatus& st = job.status();
  if (send_stop) {
    std::set<std::string> workers;
    for (const RankPlacement& p : st.placement()) {
      workers.insert(p.worker_id());
      // A rank whose START still waits in its worker's queue has not started (the START is
      // dropped with the attempt), and a dead worker's ranks are gone with it. A rank whose
      // START its live worker was handed may run until the STOP's SIGKILL, reported in a
      // heartbeat or not yet (a fast trainer reports progress before its worker's next
      // heartbeat lists it): its slot waits until a heartbeat lists it EXITED or not at all.
      const bool handed = tracker_.IsAcked(st.job_id(), p.rank()) ||
                          !outbox_.StartQueued(p.worker_id(), st.job_id(), st.attempt(), p.rank());
      if (handed && registry_.IsAlive(p.worker_id())) {
        draining_.Hold(p.worker_id(), st.job_id(), st.attempt(), p.rank(), p.slot_index(),
                       p.generation());
      } else {
        registry_.ReleaseSlot(p.worker_id(), p.slot_index(), Namespace(job));
      }
    }
    for (const std::string& w : workers) {
      outbox_.PushStop(w, st.job_id(), st.attempt());
      tracker_.StopSent(w, st.job_id(), st.attempt());
    }
  } else {
    registry_.ReleaseJob(Namespace(job));
  }
  tracker_.EndAttempt(st.job_id());
  job.clear_preempted_for();  // A preemption ends with the attempt, however it ends.
  job.clear_preempt_requested_unix_ms();
  job.clear_preempt_saved_step();
  if (quorums_.erase(st.job_id()) > 0) feed_.VotesChanged(st.job_id());  // waiting votes: LEAVE
  rendezvous_.Close(Namespace(job));
  attempt_credentials_.Remove(Namespace(job));  // late reports of this attempt find nothing
  feed_.NamespaceChanged(Namespace(job));       // waiting Gets end (ABORTED)
}

void CoordinatorCore::FailAttemptLocked(JobRecord& job, const std::string& kind,
                                        const std::string& reason, bool restartable) {
  EndAttemptLocked(job, /*send_stop=*/true);
  auto restarting = JobStateMachine(&job, clock_->Now()).FailAttempt(kind, reason, restartable);
  if (!restarting.ok()) {
    SL_LOG(ERROR) << restarting.status();
    return;
  }
  counters_.attempts_failed++;
  if (*restarting) counters_.restarts++;
  SL_LOG(WARNING) << "job " << job.status().job_id() << " attempt " << job.status().attempt()
                  << " failed (" << kind << "): " << reason
                  << (*restarting ? "; restarting" : "; no restarts left");
  jobs_.Changed(job);
}

void CoordinatorCore::ApplyFailuresLocked(const std::vector<RankFailure>& failures) {
  for (const RankFailure& f : failures) {
    auto job = jobs_.Find(f.job_id);
    if (job.ok() && (*job)->status().state() == RUNNING && !QuorumTakesFailureLocked(**job, f)) {
      FailAttemptLocked(**job, f.kind, f.reason, f.restartable);
    }
  }
}

CoordinatorCore::Counters CoordinatorCore::counters() const {
  absl::MutexLock lock(&mu_);
  Counters c = counters_;
  c.jobs_by_state = jobs_.CountByState();
  return c;
}

bool CoordinatorCore::WaitDirty(absl::Duration wait, Dirty* dirty) {
  absl::MutexLock lock(&mu_);
  return feed_.WaitDirtyLocked(&mu_, wait, dirty);
}

void CoordinatorCore::Shutdown() {
  absl::MutexLock lock(&mu_);
  feed_.Shutdown();
}

// ------------------------------------------------------------------------------- rendezvous

absl::Status CoordinatorCore::RendezvousSet(const RendezvousSetRequest& req) {
  RETURN_IF_ERROR(ServeRendezvousSet(&rendezvous_, req));
  absl::MutexLock lock(&mu_);
  feed_.NamespaceChanged(req.namespace_());
  return absl::OkStatus();
}

// ------------------------------------------------------------------------------- reports

absl::Status CoordinatorCore::ReportProgress(const ProgressReport& r,
                                             ReportProgressResponse* response) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(JobRecord * job, jobs_.Find(r.job_id()));
  RETURN_IF_ERROR(CheckReportSource(job->status(), r.attempt(), r.rank()));
  ASSIGN_OR_RETURN(const ProgressChange change,
                   ApplyProgress(r, ProgressLeader(job->status(), job->shard_degree()),
                                 job->mutable_status(), job->shard_degree()));
  if (change == ProgressChange::kProgress) {
    training_.Add(r.job_id(), MetricsPointFromReport(r, job->status(), clock_->Now()));
    jobs_.ProgressChanged(*job, clock_->Now());  // written within metrics_flush_interval
  } else if (change == ProgressChange::kBackfill || change == ProgressChange::kSample) {
    // A step the job has passed, sent again: a point only if the series lacks it.
    if (training_.Add(r.job_id(), MetricsPointFromReport(r, job->status(), clock_->Now()))) {
      feed_.JobChanged(r.job_id());
    }
    if (change == ProgressChange::kSample) jobs_.ProgressChanged(*job, clock_->Now());
  } else if (change == ProgressChange::kPeakMemory) {
    feed_.JobChanged(r.job_id());  // watchers hear of it; not persisted
  }
  if (response != nullptr) {
    response->set_durable_step(training_.DurableStep(r.job_id(), writer_->durable_ticket()));
  }
  return absl::OkStatus();
}

absl::Status CoordinatorCore::ReportCheckpoint(const CheckpointReport& r) {
  StateWriter::Ticket ticket = 0;
  {
    absl::MutexLock lock(&mu_);
    RETURN_IF_ERROR(ReportCheckpointLocked(r));
    ticket = writer_->last_ticket();
  }
  // The answer waits (without the mutex) until the record is durable: a trainer's retention
  // deletes older steps only after this acknowledgement.
  return writer_->WaitDurable(
      ticket, absl::StrCat("the checkpoint record of job ", r.job_id(), " step ", r.step()));
}

absl::Status CoordinatorCore::ReportCheckpointLocked(const CheckpointReport& r) {
  ASSIGN_OR_RETURN(JobRecord * job, jobs_.Find(r.job_id()));
  RETURN_IF_ERROR(CheckReportSource(job->status(), r.attempt(), r.rank()));
  if (r.fallback_from_step() > 0) {  // An event only: no checkpoint record changes.
    JobStateMachine(job, clock_->Now())
        .Note("CHECKPOINT_FALLBACK",
              absl::StrCat("resume step ", r.fallback_from_step(), " is not a committed checkpoint",
                           " in ", r.path(), "; attempt ", r.attempt(), " resumed from step ",
                           r.step(), ", the newest committed one there"));
    jobs_.Changed(*job);
    return absl::OkStatus();
  }
  // The manifest's report (rank 0's) says whether the step was saved for a preemption; the
  // step commits with it or with another rank's report after it.
  if (r.preempted() && r.manifest_committed()) job->set_preempt_saved_step(r.step());
  ASSIGN_OR_RETURN(const CheckpointChange change,
                   ApplyCheckpointReport(r, job, &checkpoints_, clock_->Now(),
                                         options_.max_checkpoints_per_job));
  writer_->PutCheckpoint(change.record);
  for (const auto& [job_id, step] : change.retired) writer_->DeleteCheckpoint(job_id, step);
  if (change.committed) {
    jobs_.Changed(*job);
    MaybeRequeuePreemptedLocked(*job, r.step());
    MaybeGrowLocked(*job, r.step());
  }
  return absl::OkStatus();
}

// ------------------------------------------------------------------------------- jobs

absl::StatusOr<std::string> CoordinatorCore::SubmitJob(const JobSpec& spec,
                                                       const std::string& owner) {
  RETURN_IF_ERROR(spec::ValidateForScheduling(spec));
  if (options_.validate_spec) RETURN_IF_ERROR(options_.validate_spec(spec));
  // The job is stored before it is added, and without the mutex (an fsync must not stall
  // heartbeats); a failed write fails the submission and adds nothing. Meanwhile it counts in
  // submitting_ against its owner's quota.
  const int64_t spec_bytes = static_cast<int64_t>(spec.ByteSizeLong());
  absl::StatusOr<JobRecord> rec;
  {
    absl::MutexLock lock(&mu_);
    if (feed_.shut_down()) return absl::UnavailableError("coordinator is shutting down");
    RETURN_IF_ERROR(writer_->CheckWritable());
    RETURN_IF_ERROR(CheckPlaceable(spec, registry_.List(), options_.max_world_size));
    RETURN_IF_ERROR(CheckSubmitQuota(QuotasFor(options_.quotas, user_quotas_, owner), owner,
                                     UsageLocked(owner), spec));
    rec = jobs_.NewJob(spec, clock_->Now());
    if (rec.ok()) {
      submitting_[owner].pending_jobs++;
      submitting_[owner].spec_bytes += spec_bytes;
    }
  }
  if (!rec.ok()) return rec.status();
  rec->mutable_status()->set_owner(owner);
  const absl::Status stored = writer_->PutJobOrDrop(*rec);
  std::string id;
  StateWriter::Ticket ticket = 0;
  {
    absl::MutexLock lock(&mu_);
    UserUsageCount& in_flight = submitting_[owner];
    in_flight.pending_jobs--;
    in_flight.spec_bytes -= spec_bytes;
    if (in_flight.pending_jobs == 0) submitting_.erase(owner);
    if (!stored.ok()) {
      return absl::UnavailableError(absl::StrCat("job not submitted: ", stored.message()));
    }
    id = jobs_.Add(*std::move(rec))->status().job_id();
    SL_LOG(INFO) << "job " << id << " (" << spec.name() << ", W=" << spec.world_size()
                 << ") submitted";
    ScheduleLocked();
    ticket = writer_->last_ticket();
  }
  // The job is stored; what scheduling changed (maybe its start) is awaited too, so the answer
  // comes after every transition it caused is durable. A failure there leaves the coordinator
  // read-only, but the submission itself stands.
  (void)writer_->Wait(ticket);
  return id;
}

CoordinatorCore::CheckpointOwner CoordinatorCore::OwnerOfCheckpointPath(const std::string& path,
                                                                        bool committed) const {
  absl::MutexLock lock(&mu_);
  CheckpointOwner who;
  who.job_id = committed ? checkpoints_.JobOfCommittedCheckpoint(path)
                         : checkpoints_.JobWhoseDirectoryHolds(path);
  if (who.job_id.empty()) return who;
  absl::StatusOr<const JobRecord*> job = jobs_.Find(who.job_id);
  if (job.ok()) who.owner = (*job)->status().owner();
  return who;
}

absl::StatusOr<JobStatus> CoordinatorCore::GetJob(const std::string& job_id) const {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(const JobRecord* job, jobs_.Find(job_id));
  return job->status();
}

std::vector<JobStatus> CoordinatorCore::ListJobs(const std::vector<JobState>& states) const {
  absl::MutexLock lock(&mu_);
  return jobs_.List(states);
}

void CoordinatorCore::CollectFinishedJobsLocked() {
  const std::vector<std::string> collected =
      jobs_.CollectFinished(clock_->Now(), options_.finished_job_ttl, options_.max_finished_jobs);
  for (const std::string& id : collected) {
    feed_.ForgetJob(id);
    tracker_.ForgetJob(id);
    checkpoints_.ForgetJob(id);
    training_.Forget(id);
    logs_.Forget(id);
    writer_->DeleteJob(id);
  }
  if (!collected.empty()) {
    SL_LOG(INFO) << "forgot " << collected.size() << " finished job(s), oldest " << collected[0]
                 << " (--finished_job_ttl_s, --max_finished_jobs)";
  }
}

absl::StatusOr<ListJobsResponse> CoordinatorCore::ListJobsPage(const ListJobsRequest& req,
                                                               bool newest_first) const {
  absl::MutexLock lock(&mu_);
  return jobs_.Page(req, options_.max_list_page_size, newest_first);
}

absl::Status CoordinatorCore::CancelJob(const std::string& job_id, const std::string& reason) {
  StateWriter::Ticket ticket = 0;
  {
    absl::MutexLock lock(&mu_);
    RETURN_IF_ERROR(CancelJobLocked(job_id, reason));
    ticket = writer_->last_ticket();
  }
  return writer_->WaitDurable(ticket, absl::StrCat("the cancel of job ", job_id));
}

absl::Status CoordinatorCore::CancelJobLocked(const std::string& job_id,
                                              const std::string& reason) {
  ASSIGN_OR_RETURN(JobRecord * job, jobs_.Find(job_id));
  RETURN_IF_ERROR(CheckReasonBytes(options_.quotas, "cancel reason", reason));
  RETURN_IF_ERROR(writer_->CheckWritable());
  const std::string why = reason.empty() ? "cancelled by a user" : reason;
  if (IsTerminal(job->status().state())) {
    return absl::FailedPreconditionError(absl::StrCat("job ", job_id, " has already ended (",
                                                      JobState_Name(job->status().state()),
                                                      "): there is nothing to cancel"));
  }
  JobStateMachine sm(job, clock_->Now());
  if (!IsLegalTransition(job->status().state(), CANCELLED)) return sm.Cancel(why);
  if (job->status().state() == RUNNING) EndAttemptLocked(*job, /*send_stop=*/true);
  RETURN_IF_ERROR(sm.Cancel(why));
  SL_LOG(INFO) << "job " << job_id << " cancelled: " << why;
  jobs_.Changed(*job);
  ScheduleLocked();
  return absl::OkStatus();
}

absl::StatusOr<JobStatus> CoordinatorCore::WaitJob(const std::string& job_id, int64_t after_version,
                                                   absl::Duration wait, int64_t* version) const {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(feed_.WaitForJobLocked(&mu_, job_id, after_version, absl::Now() + wait, version));
  return jobs_.records().at(job_id).status();
}

absl::StatusOr<std::optional<JobStatus>> CoordinatorCore::JobIfNewer(const std::string& job_id,
                                                                     int64_t after_version,
                                                                     int64_t* version) const {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(const JobRecord* job, jobs_.Find(job_id));
  *version = feed_.Version(job_id);
  if (*version > after_version) return std::optional<JobStatus>(job->status());
  if (feed_.shut_down()) return absl::UnavailableError("coordinator is shutting down");
  return std::optional<JobStatus>();
}

// ------------------------------------------------------------------------------- checkpoints

absl::StatusOr<std::vector<CheckpointInfo>> CoordinatorCore::ListCheckpoints(
    const std::string& job_id) const {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(jobs_.Find(job_id).status());
  return checkpoints_.List(job_id);
}

absl::StatusOr<GetCheckpointResponse> CoordinatorCore::GetCheckpoint(const std::string& job_id,
                                                                     int64_t step) const {
  GetCheckpointResponse resp;
  {
    absl::MutexLock lock(&mu_);
    ASSIGN_OR_RETURN(*resp.mutable_info(), checkpoints_.Get(job_id, step));
  }
  // Outside the mutex: the path comes from a trainer (manifest_fetch.h bounds the read).
  ASSIGN_OR_RETURN(std::optional<CheckpointManifest> manifest,
                   manifests_.Get(resp.info(), options_.file_read_timeout));
  if (manifest) *resp.mutable_manifest() = *std::move(manifest);
  return resp;
}

}  // namespace shardline::coordinator
