#include "coordinator/coordinator_core.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "checkpoint/format.h"
#include "checkpoint/manifest_io.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "coordinator/bounded_file_read.h"
#include "coordinator/job_state_machine.h"
#include "coordinator/rank_reports.h"
#include "coordinator/scheduler.h"
#include "spec/validate.h"

namespace shardline::coordinator {
namespace {
// A manifest lists every tensor's ranges: megabytes for large models, never near this.
constexpr int64_t kMaxManifestBytes = int64_t{256} << 20;
}  // namespace

CoordinatorCore::CoordinatorCore(const CoreOptions& options, std::unique_ptr<StateStore> store)
    : options_(options),
      clock_(options.clock),
      writer_(std::make_unique<StateWriter>(std::move(store), options.state_retry_interval)),
      registry_(options.clock, options.heartbeat_timeout),
      jobs_(writer_.get(), &feed_),
      outbox_(&feed_, options.stop_grace_period_s) {}

CoordinatorCore::~CoordinatorCore() { Shutdown(); }

absl::StatusOr<std::unique_ptr<CoordinatorCore>> CoordinatorCore::Create(
    const CoreOptions& options) {
  if (options.clock == nullptr) return absl::InvalidArgumentError("CoreOptions.clock is required");
  if (options.heartbeat_timeout <= options.heartbeat_interval) {
    return absl::InvalidArgumentError(absl::StrCat(
        "heartbeat timeout ", absl::FormatDuration(options.heartbeat_timeout),
        " must exceed the heartbeat interval ", absl::FormatDuration(options.heartbeat_interval)));
  }
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
  ASSIGN_OR_RETURN(const std::vector<CheckpointRecord> checkpoints, store->LoadCheckpoints());
  ASSIGN_OR_RETURN(const std::vector<JobRecord> jobs, store->LoadJobs());
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
    tracker_.RestoreAttempt(rec.status());
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
  SL_LOG(INFO) << "loaded state from " << options_.state_dir << ": " << jobs.size() << " jobs ("
               << running << " running), " << workers.size() << " workers, " << checkpoints.size()
               << " checkpoint records";
  return absl::OkStatus();
}

void CoordinatorCore::PersistWorker(const std::string& worker_id) {
  auto info = registry_.Get(worker_id);
  if (info.ok()) writer_->PutWorker(*info);  // queued; a failure makes the writer read-only
}

absl::Status CoordinatorCore::CheckWritable() const {
  if (!writer_->stuck()) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(
      "coordinator is read-only: the state store cannot be written (", writer_->read_only_reason(),
      "); reads keep working, changes are accepted again once ",
      "the queued writes succeed (retried every ",
      absl::FormatDuration(options_.state_retry_interval), ")"));
}

absl::Status CoordinatorCore::WaitDurable(StateWriter::Ticket ticket,
                                          const std::string& what) const {
  absl::Status s = writer_->Wait(ticket);
  if (s.ok()) return s;
  return absl::UnavailableError(
      absl::StrCat(what, " is not durable: ", s.message(),
                   "; the coordinator is read-only until the state store can be written again"));
}

// ------------------------------------------------------------------------------- workers

absl::StatusOr<RegisterWorkerResponse> CoordinatorCore::RegisterWorker(
    const RegisterWorkerRequest& req) {
  ASSIGN_OR_RETURN(const std::string id, registry_.Register(req));
  PersistWorker(id);
  SL_LOG(INFO) << "worker " << id << " (" << req.node_name() << ", " << req.slots_size()
               << " slots) registered";
  RegisterWorkerResponse resp;
  resp.set_worker_id(id);
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
  if (req.ranks_size() == 0 && !tracker_.HasRunningRanks(worker) && !draining_.count(worker)) {
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
                   << rs.job_id() << " attempt " << rs.attempt() << ", which is over: STOP";
    }
  }
  const std::vector<RankFailure> lost = tracker_.LostRanks(worker, reported);
  ApplyFailuresLocked(lost);
  changed |= ReleaseDrainedLocked(worker, req.ranks());
  if (changed || !lost.empty()) ScheduleLocked();
  return resp;
}

bool CoordinatorCore::ReleaseDrainedLocked(
    const std::string& worker, const google::protobuf::RepeatedPtrField<RankStatus>& ranks) {
  auto w = draining_.find(worker);
  if (w == draining_.end()) return false;
  std::set<DrainKey> alive;
  for (const RankStatus& rs : ranks) {
    if (rs.state() != RankStatus::EXITED) alive.insert({rs.job_id(), rs.attempt(), rs.rank()});
  }
  bool freed = false;
  for (auto it = w->second.begin(); it != w->second.end();) {
    if (alive.count(it->first)) {
      ++it;
      continue;
    }
    const auto& [job_id, attempt, rank] = it->first;
    registry_.ReleaseSlot(worker, it->second, absl::StrCat(job_id, "/", attempt));
    it = w->second.erase(it);
    freed = true;
  }
  if (w->second.empty()) draining_.erase(w);
  return freed;
}

void CoordinatorCore::NoteDrainingRanksLostLocked(const std::string& worker,
                                                  const std::string& node) {
  auto w = draining_.find(worker);
  if (w == draining_.end()) return;
  // The registry dropped the dead worker's reservations. A job still waiting to restart learns
  // why its world may shrink: the stopped ranks on that worker are gone with it.
  std::map<std::pair<std::string, int32_t>, std::vector<int32_t>> lost;  // (job, attempt)
  for (const auto& [key, slot] : w->second) {
    lost[{std::get<0>(key), std::get<1>(key)}].push_back(std::get<2>(key));
  }
  draining_.erase(w);
  for (const auto& [job_attempt, ranks] : lost) {
    auto job = jobs_.Find(job_attempt.first);
    if (!job.ok() || IsTerminal((*job)->status().state())) continue;
    JobStateMachine(*job, clock_->Now())
        .Note("WORKER_LOST",
              absl::StrCat("worker ", worker, " (node ", node, ") missed heartbeats for ",
                           absl::FormatDuration(options_.heartbeat_timeout), "; stopped ranks [",
                           absl::StrJoin(ranks, ", "), "] of attempt ", job_attempt.second,
                           " lost with it"));
    jobs_.Changed(**job);
  }
}

void CoordinatorCore::RankSucceededLocked(JobRecord& job, int32_t rank) {
  const auto& done = job.succeeded_ranks();
  if (std::find(done.begin(), done.end(), rank) != done.end()) return;
  job.add_succeeded_ranks(rank);
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
      if (!tracker_.IsAcked(id, start.rank())) resend.push_back(std::move(start));
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

// ------------------------------------------------------------------------------- lifecycle

void CoordinatorCore::ScheduleLocked() {
  if (feed_.shut_down()) return;
  std::vector<QueuedJob> queue;
  std::map<Slot::Kind, std::vector<NodeCapacity>> free;
  // A job whose previous attempt still has stopped ranks alive waits for them (they hold their
  // slots, maybe a checkpoint save in flight): restarting around them would shrink an elastic
  // job for nothing. Their worker's death ends the wait too.
  std::map<std::string, int> stopping;
  for (const auto& [worker, ranks] : draining_) {
    for (const auto& [key, slot] : ranks) stopping[std::get<0>(key)]++;
  }
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
    queue.push_back({id, &st.spec(), st.attempt(), job.seq(), job.restart_not_before_unix_ms()});
    const Slot::Kind kind = SlotKindFor(st.spec());
    if (!free.count(kind)) free[kind] = registry_.FreeCapacity(kind);
  }
  std::set<Slot::Kind> failed;  // a start failed: later decisions of the kind assumed its slots
  for (const Decision& d :
       Schedule(std::move(queue), std::move(free), absl::ToUnixMillis(clock_->Now()))) {
    if (failed.count(d.kind)) continue;
    JobRecord& job = jobs_.records().at(d.job_id);
    if (d.action == Decision::kWait) {
      if (job.status().message() != d.message) {
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
  for (const RankPlan& r : plan.ranks) {
    if (absl::Status s = registry_.Reserve(r.worker_id, r.slot_index, holder); !s.ok()) {
      registry_.ReleaseJob(holder);
      return s;
    }
  }
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
  tracker_.StartAttempt(st);
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
  return info;
}

void CoordinatorCore::EndAttemptLocked(JobRecord& job, bool send_stop) {
  const JobStatus& st = job.status();
  if (send_stop) {
    std::set<std::string> workers;
    for (const RankPlacement& p : st.placement()) {
      workers.insert(p.worker_id());
      // A rank its worker never reported has not started (its queued START is dropped with
      // the attempt), and a dead worker's ranks are gone with it; a rank its live worker
      // reported may run until the STOP's SIGKILL: its slot waits.
      if (tracker_.IsAcked(st.job_id(), p.rank()) && registry_.IsAlive(p.worker_id())) {
        draining_[p.worker_id()][{st.job_id(), st.attempt(), p.rank()}] = p.slot_index();
      } else {
        registry_.ReleaseSlot(p.worker_id(), p.slot_index(), Namespace(job));
      }
    }
    for (const std::string& w : workers) outbox_.PushStop(w, st.job_id(), st.attempt());
  } else {
    registry_.ReleaseJob(Namespace(job));
  }
  tracker_.EndAttempt(st.job_id());
  rendezvous_.Close(Namespace(job));
  feed_.NamespaceChanged(Namespace(job));  // waiting Gets end (ABORTED)
}

void CoordinatorCore::FailAttemptLocked(JobRecord& job, const std::string& kind,
                                        const std::string& reason) {
  EndAttemptLocked(job, /*send_stop=*/true);
  auto restarting = JobStateMachine(&job, clock_->Now()).FailAttempt(kind, reason);
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
    if (job.ok() && (*job)->status().state() == RUNNING) FailAttemptLocked(**job, f.kind, f.reason);
  }
}

void CoordinatorCore::Tick() {
  const std::vector<std::string> dead = registry_.ReapDead();
  for (const std::string& w : dead) PersistWorker(w);
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
  ScheduleLocked();
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

absl::Status CoordinatorCore::ReportProgress(const ProgressReport& r) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(JobRecord * job, jobs_.Find(r.job_id()));
  RETURN_IF_ERROR(CheckReportSource(job->status(), r.attempt(), r.rank()));
  ASSIGN_OR_RETURN(const ProgressChange change, ApplyProgress(r, job->mutable_status()));
  if (change == ProgressChange::kProgress) {
    jobs_.Changed(*job);  // persisted: rank 0 reports only every log_every steps
  } else if (change == ProgressChange::kPeakMemory) {
    feed_.JobChanged(r.job_id());  // watchers hear of it; not persisted
  }
  return absl::OkStatus();
}

absl::Status CoordinatorCore::ReportCheckpoint(const CheckpointReport& r) {
  StateWriter::Ticket ticket = 0;
  RETURN_IF_ERROR(ReportCheckpointInMemory(r, &ticket));
  return WaitDurable(ticket,
                     absl::StrCat("the checkpoint record of job ", r.job_id(), " step ", r.step()));
}

absl::Status CoordinatorCore::ReportCheckpointInMemory(const CheckpointReport& r,
                                                       StateWriter::Ticket* ticket) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(JobRecord * job, jobs_.Find(r.job_id()));
  RETURN_IF_ERROR(CheckReportSource(job->status(), r.attempt(), r.rank()));
  if (r.fallback_from_step() > 0) {  // An event only: no checkpoint record changes.
    JobStateMachine(job, clock_->Now())
        .Note("CHECKPOINT_FALLBACK",
              absl::StrCat("resume step ", r.fallback_from_step(), " is not a committed checkpoint",
                           " in ", r.path(), "; attempt ", r.attempt(), " resumed from step ",
                           r.step(), ", the newest committed one there"));
    jobs_.Changed(*job);
    *ticket = writer_->last_ticket();
    return absl::OkStatus();
  }
  JobStatus& st = *job->mutable_status();
  const CheckpointRegistry::Layout layout{
      st.world_size(), FsdpSpec::ShardingStrategy_Name(st.spec().fsdp().sharding_strategy()),
      job->shard_degree()};
  bool committed = false;
  ASSIGN_OR_RETURN(const CheckpointRecord rec,
                   checkpoints_.Report(r, layout, clock_->Now(), &committed));
  writer_->PutCheckpoint(rec);
  if (committed) {
    st.set_latest_checkpoint_step(std::max(st.latest_checkpoint_step(), r.step()));
    JobStateMachine(job, clock_->Now())
        .Note("CHECKPOINT_COMMITTED", absl::StrCat("step ", r.step(), " at ", rec.info().path(),
                                                   " (", rec.files_size(), " data files)"));
    for (const auto& [jid, step] :
         checkpoints_.ApplyRetention(r.job_id(), st.spec().checkpoint().keep_last())) {
      writer_->DeleteCheckpoint(jid, step);
    }
    jobs_.Changed(*job);
  }
  *ticket = writer_->last_ticket();
  return absl::OkStatus();
}

// ------------------------------------------------------------------------------- jobs

absl::StatusOr<std::string> CoordinatorCore::SubmitJob(const JobSpec& spec) {
  RETURN_IF_ERROR(spec::ValidateForScheduling(spec));
  if (options_.validate_spec) RETURN_IF_ERROR(options_.validate_spec(spec));
  // The job is stored before it is added, and without the mutex (an fsync must not stall
  // heartbeats); a failed write fails the submission and adds nothing.
  absl::StatusOr<JobRecord> rec;
  {
    absl::MutexLock lock(&mu_);
    if (feed_.shut_down()) return absl::UnavailableError("coordinator is shutting down");
    RETURN_IF_ERROR(CheckWritable());
    rec = jobs_.NewJob(spec, clock_->Now());
  }
  if (!rec.ok()) return rec.status();
  if (absl::Status s = writer_->PutJobOrDrop(*rec); !s.ok()) {
    return absl::UnavailableError(absl::StrCat("job not submitted: ", s.message()));
  }
  std::string id;
  StateWriter::Ticket ticket = 0;
  {
    absl::MutexLock lock(&mu_);
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

absl::StatusOr<JobStatus> CoordinatorCore::GetJob(const std::string& job_id) const {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(const JobRecord* job, jobs_.Find(job_id));
  return job->status();
}

std::vector<JobStatus> CoordinatorCore::ListJobs(const std::vector<JobState>& states) const {
  absl::MutexLock lock(&mu_);
  return jobs_.List(states);
}

absl::Status CoordinatorCore::CancelJob(const std::string& job_id, const std::string& reason) {
  StateWriter::Ticket ticket = 0;
  RETURN_IF_ERROR(CancelJobInMemory(job_id, reason, &ticket));
  return WaitDurable(ticket, absl::StrCat("the cancel of job ", job_id));
}

absl::Status CoordinatorCore::CancelJobInMemory(const std::string& job_id,
                                                const std::string& reason,
                                                StateWriter::Ticket* ticket) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(JobRecord * job, jobs_.Find(job_id));
  RETURN_IF_ERROR(CheckWritable());
  const std::string why = reason.empty() ? "cancelled by a user" : reason;
  JobStateMachine sm(job, clock_->Now());
  if (!IsLegalTransition(job->status().state(), CANCELLED)) return sm.Cancel(why);
  if (job->status().state() == RUNNING) EndAttemptLocked(*job, /*send_stop=*/true);
  RETURN_IF_ERROR(sm.Cancel(why));
  SL_LOG(INFO) << "job " << job_id << " cancelled: " << why;
  jobs_.Changed(*job);
  ScheduleLocked();
  *ticket = writer_->last_ticket();
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
  // Only when this machine sees the checkpoint directory (shared storage); else info alone. The
  // path comes from a trainer: read only a regular file, on a helper thread, for a bounded time.
  const std::string path = absl::StrCat(resp.info().path(), "/", checkpoint::kManifestFile);
  absl::StatusOr<std::string> text =
      ReadRegularFileBounded(path, options_.file_read_timeout, kMaxManifestBytes);
  if (absl::IsNotFound(text.status())) return resp;
  if (absl::IsFailedPrecondition(text.status()) || absl::IsDeadlineExceeded(text.status()) ||
      absl::IsOutOfRange(text.status())) {
    return text.status();
  }
  if (!text.ok()) return resp;
  auto manifest = checkpoint::ManifestFromJson(*text, path);
  if (manifest.ok() && manifest->format_version() == checkpoint::kFormatVersion) {
    *resp.mutable_manifest() = *std::move(manifest);
  }
  return resp;
}

}  // namespace shardline::coordinator
