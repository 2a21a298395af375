#include "coordinator/coordinator_core.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include <google/protobuf/util/json_util.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "coordinator/job_state_machine.h"

namespace shardline::coordinator {
namespace {

Slot::Kind SlotKindFor(const JobSpec& spec) {
  return spec.device().kind() == DeviceSpec::CUDA ? Slot::CUDA : Slot::CPU;
}

// Name: [a-zA-Z0-9._-], 1..64 characters (job_spec.proto).
absl::Status BasicSpecChecks(const JobSpec& spec) {
  if (spec.name().empty() || spec.name().size() > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("name: must be 1 to 64 characters, got \"", spec.name(), "\""));
  }
  for (char c : spec.name()) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) {
      return absl::InvalidArgumentError(absl::StrCat(
          "name: \"", spec.name(), "\" may only hold letters, digits, '.', '_' and '-'"));
    }
  }
  if (spec.world_size() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("world_size: must be >= 1, got ", spec.world_size()));
  }
  if (spec.restart().max_restarts() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("restart.max_restarts: must be >= 0, got ", spec.restart().max_restarts()));
  }
  const int32_t min_w = spec.elastic().min_world_size();
  if (min_w < 0 || min_w > spec.world_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "elastic.min_world_size: ", min_w, " must be in [0, world_size ", spec.world_size(), "]"));
  }
  auto s = ShardDegreeFor(spec, spec.world_size());
  if (!s.ok()) return s.status();
  return absl::OkStatus();
}

std::string LastLine(const std::string& text) {
  std::vector<std::string> lines = absl::StrSplit(text, '\n', absl::SkipWhitespace());
  return lines.empty() ? "" : lines.back();
}

}  // namespace

CoordinatorCore::CoordinatorCore(const CoreOptions& options)
    : options_(options),
      clock_(options.clock),
      registry_(options.clock, options.heartbeat_timeout) {}

CoordinatorCore::~CoordinatorCore() { Shutdown(); }

absl::StatusOr<std::unique_ptr<CoordinatorCore>> CoordinatorCore::Create(
    const CoreOptions& options) {
  if (options.clock == nullptr) return absl::InvalidArgumentError("CoreOptions.clock is required");
  if (options.heartbeat_timeout <= options.heartbeat_interval) {
    return absl::InvalidArgumentError(absl::StrCat(
        "heartbeat timeout ", absl::FormatDuration(options.heartbeat_timeout),
        " must exceed the heartbeat interval ", absl::FormatDuration(options.heartbeat_interval)));
  }
  std::unique_ptr<CoordinatorCore> core(new CoordinatorCore(options));
  if (!options.state_dir.empty()) {
    auto store = StateStore::Open(options.state_dir);
    if (!store.ok()) return store.status();
    core->store_ = std::move(*store);
    if (absl::Status s = core->Load(); !s.ok()) return s;
  }
  return core;
}

std::string CoordinatorCore::Namespace(const JobRecord& rec) {
  return absl::StrCat(rec.status().job_id(), "/", rec.status().attempt());
}

absl::Status CoordinatorCore::Load() {
  auto workers = store_->LoadWorkers();
  if (!workers.ok()) return workers.status();
  for (const WorkerInfo& w : *workers) registry_.Restore(w);
  auto checkpoints = store_->LoadCheckpoints();
  if (!checkpoints.ok()) return checkpoints.status();
  auto jobs = store_->LoadJobs();
  if (!jobs.ok()) return jobs.status();
  absl::MutexLock lock(&mu_);
  for (const CheckpointRecord& c : *checkpoints) checkpoints_.Restore(c);
  int running = 0;
  for (const JobRecord& rec : *jobs) {
    Job& job = jobs_[rec.status().job_id()];
    job.rec = rec;
    job.version = next_version_++;
    next_seq_ = std::max(next_seq_, rec.seq() + 1);
    if (rec.status().state() != RUNNING) continue;
    ++running;
    // The attempt goes on where its workers come back: keep its slots and rendezvous secret.
    bool all_reserved = true;
    for (const RankPlacement& p : rec.status().placement()) {
      all_reserved &= registry_.Reserve(p.worker_id(), p.slot_index(), rec.status().job_id()).ok();
    }
    rendezvous_.Open(Namespace(rec), rec.rendezvous_secret());
    for (const RankPlacement& p : rec.status().placement()) {
      job.acked.insert(p.rank());
      running_ranks_[p.worker_id()].insert({rec.status().job_id(), p.rank()});
    }
    JobStateMachine(&job.rec, clock_->Now())
        .Note("COORDINATOR_RESTARTED",
              "coordinator restarted; waiting for the attempt's workers "
              "to heartbeat again");
    if (!all_reserved) {
      FailAttemptLocked(job, "WORKER_LOST",
                        "a worker of this attempt was already dead when the coordinator restarted");
    } else {
      Changed(job);
    }
  }
  SL_LOG(INFO) << "loaded state from " << options_.state_dir << ": " << jobs_.size() << " jobs ("
               << running << " running), " << workers->size() << " workers, " << checkpoints->size()
               << " checkpoint records";
  return absl::OkStatus();
}

CoordinatorCore::Job* CoordinatorCore::FindJob(const std::string& job_id) {
  auto it = jobs_.find(job_id);
  return it == jobs_.end() ? nullptr : &it->second;
}

void CoordinatorCore::Changed(Job& job) {
  job.version = next_version_++;
  dirty_jobs_.insert(job.rec.status().job_id());
  if (store_) {
    if (absl::Status s = store_->PutJob(job.rec); !s.ok()) {
      SL_LOG(ERROR) << "cannot persist job " << job.rec.status().job_id() << ": " << s;
    }
  }
  changed_.SignalAll();
}

void CoordinatorCore::PersistWorker(const std::string& worker_id) {
  if (!store_) return;
  auto info = registry_.Get(worker_id);
  if (!info.ok()) return;
  if (absl::Status s = store_->PutWorker(*info); !s.ok()) {
    SL_LOG(ERROR) << "cannot persist worker " << worker_id << ": " << s;
  }
}

// ------------------------------------------------------------------------------- workers

absl::StatusOr<RegisterWorkerResponse> CoordinatorCore::RegisterWorker(
    const RegisterWorkerRequest& req) {
  auto id = registry_.Register(req);
  if (!id.ok()) return id.status();
  PersistWorker(*id);
  SL_LOG(INFO) << "worker " << *id << " (" << req.node_name() << ", " << req.slots_size()
               << " slots) registered";
  RegisterWorkerResponse resp;
  resp.set_worker_id(*id);
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
  absl::Status s = registry_.Heartbeat(req.worker_id());
  if (!s.ok()) {
    resp.set_reregister(true);
    return resp;
  }
  absl::MutexLock lock(&mu_);
  auto watched = running_ranks_.find(req.worker_id());
  const bool has_running = watched != running_ranks_.end() && !watched->second.empty();
  if (req.ranks_size() == 0 && !has_running) return resp;  // the common case at scale
  bool changed = false;
  std::set<std::pair<std::string, int32_t>> reported;
  for (const RankStatus& rs : req.ranks()) {
    Job* job = FindJob(rs.job_id());
    const bool current = job != nullptr && job->rec.status().state() == RUNNING &&
                         job->rec.status().attempt() == rs.attempt() && rs.rank() >= 0 &&
                         rs.rank() < job->rec.status().placement_size() &&
                         job->rec.status().placement(rs.rank()).worker_id() == req.worker_id();
    if (current) {
      reported.insert({rs.job_id(), rs.rank()});
      if (job->acked.insert(rs.rank()).second && rs.state() != RankStatus::EXITED) {
        running_ranks_[req.worker_id()].insert({rs.job_id(), rs.rank()});
      }
    }
    if (rs.state() == RankStatus::EXITED) {
      changed = true;
      ApplyRankStatusLocked(req.worker_id(), rs);
    } else if (!current) {
      // A rank of an attempt that is over (e.g. failed while this worker was cut off) still
      // runs here: stop it, once per stream of the worker.
      const bool stale = job == nullptr || job->rec.status().state() != RUNNING ||
                         job->rec.status().attempt() != rs.attempt();
      if (stale && stops_sent_.insert({req.worker_id(), rs.job_id(), rs.attempt()}).second) {
        Assignment stop;
        stop.set_action(Assignment::STOP);
        stop.set_job_id(rs.job_id());
        stop.set_attempt(rs.attempt());
        stop.set_grace_period_s(options_.stop_grace_period_s);
        Push(req.worker_id(), std::move(stop));
        SL_LOG(INFO) << "worker " << req.worker_id() << " still runs rank " << rs.rank() << " of "
                     << rs.job_id() << " attempt " << rs.attempt() << ", which is over: STOP";
      }
    }
  }
  if (has_running) {
    // A rank the worker acknowledged earlier and no longer lists is gone (e.g. its daemon
    // restarted and the kernel killed its trainers): fail the attempt rather than wait forever.
    const std::set<std::pair<std::string, int32_t>> expected = running_ranks_[req.worker_id()];
    for (const auto& [job_id, rank] : expected) {
      if (reported.count({job_id, rank})) continue;
      Job* job = FindJob(job_id);
      if (job == nullptr || job->rec.status().state() != RUNNING ||
          !running_ranks_[req.worker_id()].count({job_id, rank})) {
        continue;
      }
      changed = true;
      FailAttemptLocked(
          *job, "RANK_LOST",
          absl::StrCat("rank ", rank, " on node ", job->rec.status().placement(rank).node_name(),
                       " is no longer reported by its worker (daemon restarted?)"));
    }
  }
  if (changed) ScheduleLocked();
  return resp;
}

void CoordinatorCore::ApplyRankStatusLocked(const std::string& worker_id, const RankStatus& rs) {
  Job* job = FindJob(rs.job_id());
  if (job == nullptr) return;
  JobStatus& st = *job->rec.mutable_status();
  // Reports of earlier attempts (their ranks are being stopped) change nothing.
  if (st.state() != RUNNING || rs.attempt() != st.attempt()) return;
  if (rs.rank() < 0 || rs.rank() >= st.placement_size()) return;
  const RankPlacement& p = st.placement(rs.rank());
  // A worker speaks only for its own ranks.
  if (p.worker_id() != worker_id) return;
  if (rs.exit_code() == 0) {
    const auto& done = job->rec.succeeded_ranks();
    if (std::find(done.begin(), done.end(), rs.rank()) != done.end()) return;
    job->rec.add_succeeded_ranks(rs.rank());
    running_ranks_[worker_id].erase({rs.job_id(), rs.rank()});
    if (job->rec.succeeded_ranks_size() == st.world_size()) {
      EndAttemptLocked(*job, /*send_stop=*/false);
      (void)JobStateMachine(&job->rec, clock_->Now())
          .Succeed(absl::StrCat("all ", st.world_size(), " ranks of attempt ", st.attempt(),
                                " exited with code 0"));
      SL_LOG(INFO) << "job " << st.job_id() << " succeeded";
    }
    Changed(*job);
    return;
  }
  std::string reason =
      absl::StrCat("rank ", rs.rank(), " on node ", p.node_name(),
                   rs.exit_code() < 0 ? " was killed by signal " : " exited with code ",
                   std::abs(rs.exit_code()));
  const std::string last = LastLine(rs.log_tail());
  if (!last.empty()) absl::StrAppend(&reason, ": ", last);
  FailAttemptLocked(*job, "RANK_FAILED", reason);
}

absl::StatusOr<int64_t> CoordinatorCore::OpenAssignmentStream(const std::string& worker_id) {
  auto info = registry_.Get(worker_id);
  if (!info.ok()) return info.status();
  if (info->state() != WorkerInfo::ALIVE) {
    return absl::FailedPreconditionError(
        absl::StrCat("worker ", worker_id, " was declared dead; register again"));
  }
  absl::MutexLock lock(&mu_);
  Outbox& box = outboxes_[worker_id];
  box.generation++;
  // A new stream may belong to a new daemon: stale ranks it reports are told to stop again.
  for (auto it = stops_sent_.lower_bound({worker_id, "", INT32_MIN});
       it != stops_sent_.end() && std::get<0>(*it) == worker_id;) {
    it = stops_sent_.erase(it);
  }
  box.queue.clear();
  for (const auto& [id, job] : jobs_) {
    if (job.rec.status().state() == RUNNING) PushStartsLocked(job, worker_id, &box);
  }
  // Only STARTs the worker has not acknowledged (see the header).
  for (auto it = box.queue.begin(); it != box.queue.end();) {
    const Job* job = FindJob(it->job_id());
    it = job != nullptr && job->acked.count(it->rank()) ? box.queue.erase(it) : std::next(it);
  }
  dirty_workers_.insert(worker_id);
  changed_.SignalAll();  // an older stream of this worker ends
  return box.generation;
}

absl::StatusOr<bool> CoordinatorCore::NextAssignment(const std::string& worker_id,
                                                     int64_t generation, absl::Duration wait,
                                                     Assignment* out) {
  absl::MutexLock lock(&mu_);
  const absl::Time deadline = absl::Now() + wait;
  while (true) {
    if (shutdown_) return absl::UnavailableError("coordinator is shutting down");
    Outbox& box = outboxes_[worker_id];
    if (box.generation != generation) {
      return absl::AbortedError(
          absl::StrCat("assignment stream of worker ", worker_id, " superseded by a newer one"));
    }
    while (!box.queue.empty()) {
      *out = std::move(box.queue.front());
      box.queue.pop_front();
      if (out->action() != Assignment::START) return true;
      // A START of an attempt that ended meanwhile is not delivered.
      const Job* job = FindJob(out->job_id());
      if (job == nullptr || job->rec.status().state() != RUNNING ||
          job->rec.status().attempt() != out->attempt()) {
        continue;
      }
      // Group lists are filled here, one rank at a time, not when the attempt is placed: for
      // W = 16384 they hold W * (S + W/S) integers, too much work for one critical section.
      const int32_t w = out->world_size();
      const int32_t sd = job->rec.shard_degree() > 0 ? job->rec.shard_degree() : w;
      const int32_t group = out->rank() / sd;
      out->mutable_shard_group_ranks()->Reserve(sd);
      for (int32_t k = 0; k < sd; ++k) out->add_shard_group_ranks(group * sd + k);
      out->mutable_replicate_group_ranks()->Reserve(w / sd);
      for (int32_t k = out->rank() % sd; k < w; k += sd) out->add_replicate_group_ranks(k);
      return true;
    }
    if (changed_.WaitWithDeadline(&mu_, deadline)) return false;
  }
}

std::vector<WorkerInfo> CoordinatorCore::ListWorkers() const { return registry_.List(); }

void CoordinatorCore::Push(const std::string& worker_id, Assignment a) {
  outboxes_[worker_id].queue.push_back(std::move(a));
  dirty_workers_.insert(worker_id);
  changed_.SignalAll();
}

void CoordinatorCore::PushStartsLocked(const Job& job, const std::string& worker_id, Outbox* only) {
  const JobStatus& st = job.rec.status();
  std::map<std::string, int32_t> local_world;
  for (const RankPlacement& q : st.placement()) local_world[q.worker_id()]++;
  std::string master_addr;
  if (st.placement_size() > 0) {
    auto rank0 = registry_.Get(st.placement(0).worker_id());
    if (rank0.ok()) master_addr = rank0->address();
  }
  for (const RankPlacement& p : st.placement()) {
    if (!worker_id.empty() && p.worker_id() != worker_id) continue;
    Assignment a = StartAssignment(job, p, local_world[p.worker_id()], master_addr);
    if (only != nullptr) {
      only->queue.push_back(std::move(a));
    } else {
      dirty_workers_.insert(p.worker_id());
      outboxes_[p.worker_id()].queue.push_back(std::move(a));
    }
  }
  changed_.SignalAll();
}

Assignment CoordinatorCore::StartAssignment(const Job& job, const RankPlacement& p,
                                            int32_t local_world,
                                            const std::string& master_addr) const {
  const JobStatus& st = job.rec.status();
  const int32_t w = st.world_size();
  Assignment a;
  a.set_action(Assignment::START);
  a.set_job_id(st.job_id());
  a.set_attempt(st.attempt());
  a.set_rank(p.rank());
  a.set_world_size(w);
  a.set_local_rank(p.local_rank());
  a.set_local_world_size(local_world);
  a.set_slot_index(p.slot_index());
  // shard_group_ranks / replicate_group_ranks: filled by NextAssignment at delivery.
  a.set_rendezvous_namespace(Namespace(job.rec));
  a.set_rendezvous_secret(job.rec.rendezvous_secret());
  *a.mutable_spec() = st.spec();
  a.set_master_addr(master_addr);
  // A restarted attempt resumes from the newest committed step; a first attempt from the step
  // its spec names (the trainer resolves resume_step -1 itself when no step is committed here).
  int64_t resume = checkpoints_.LatestCommitted(st.job_id());
  if (st.attempt() == 1 && resume == 0 && st.spec().checkpoint().resume_step() > 0) {
    resume = st.spec().checkpoint().resume_step();
  }
  a.set_resume_step(resume);
  a.set_grace_period_s(options_.stop_grace_period_s);
  return a;
}

// ------------------------------------------------------------------------------- scheduling

void CoordinatorCore::ScheduleLocked() {
  if (shutdown_) return;
  std::vector<Job*> pending;
  for (auto& [id, job] : jobs_) {
    if (job.rec.status().state() == PENDING) pending.push_back(&job);
  }
  std::sort(pending.begin(), pending.end(), [](const Job* a, const Job* b) {
    const int32_t pa = a->rec.status().spec().priority(), pb = b->rec.status().spec().priority();
    return pa != pb ? pa > pb : a->rec.seq() < b->rec.seq();
  });
  const int64_t now_ms = absl::ToUnixMillis(clock_->Now());
  std::set<Slot::Kind> blocked;
  for (Job* job : pending) {
    if (job->rec.restart_not_before_unix_ms() > now_ms) continue;  // in restart backoff
    const JobSpec& spec = job->rec.status().spec();
    const Slot::Kind kind = SlotKindFor(spec);
    if (blocked.count(kind)) continue;
    const std::vector<NodeCapacity> caps = registry_.FreeCapacity(kind);
    int32_t free = 0;
    for (const NodeCapacity& c : caps) free += static_cast<int32_t>(c.free_slots.size());
    // The first attempt runs at the full world size; a restart may shrink (elastic).
    const int32_t w = job->rec.status().attempt() == 0
                          ? (free >= spec.world_size() ? spec.world_size() : 0)
                          : ElasticWorldSize(spec, free);
    if (w == 0) {
      blocked.insert(kind);
      const std::string msg =
          absl::StrCat("waiting for ", spec.world_size(), " ", Slot::Kind_Name(kind), " slots (",
                       free, " free on ", caps.size(), " live workers)");
      if (job->rec.status().message() != msg) {
        job->rec.mutable_status()->set_message(msg);
        Changed(*job);
      }
      continue;
    }
    auto s = ShardDegreeFor(spec, w);
    absl::StatusOr<Plan> plan = s.ok() ? PlanPlacement(w, *s, caps) : s.status();
    if (!plan.ok()) {
      SL_LOG(WARNING) << "cannot place job " << job->rec.status().job_id() << ": " << plan.status();
      blocked.insert(kind);
      continue;
    }
    if (absl::Status st = StartAttemptLocked(*job, *plan); !st.ok()) {
      SL_LOG(ERROR) << "cannot start job " << job->rec.status().job_id() << ": " << st;
      blocked.insert(kind);
    }
  }
}

absl::Status CoordinatorCore::StartAttemptLocked(Job& job, const Plan& plan) {
  const std::string& job_id = job.rec.status().job_id();
  for (const RankPlan& r : plan.ranks) {
    if (absl::Status s = registry_.Reserve(r.worker_id, r.slot_index, job_id); !s.ok()) {
      registry_.ReleaseJob(job_id);
      return s;
    }
  }
  std::set<std::string> nodes;
  for (const RankPlan& r : plan.ranks) nodes.insert(r.node_name);
  const JobSpec& spec = job.rec.status().spec();
  std::string reason =
      absl::StrCat(plan.world_size, " ranks on ", nodes.size(), " node(s), ",
                   plan.world_size / plan.shard_degree, " shard group(s) of ", plan.shard_degree);
  if (plan.world_size < spec.world_size()) {
    absl::StrAppend(&reason, "; elastic: world shrunk from ", spec.world_size());
  }
  const int64_t resume = checkpoints_.LatestCommitted(job_id);
  if (resume > 0) absl::StrAppend(&reason, "; resuming from checkpoint step ", resume);
  JobStateMachine sm(&job.rec, clock_->Now());
  if (absl::Status s = sm.Start(plan.world_size, reason); !s.ok()) {
    registry_.ReleaseJob(job_id);
    return s;
  }
  JobStatus& st = *job.rec.mutable_status();
  job.acked.clear();
  job.rec.set_shard_degree(plan.shard_degree);
  job.rec.set_rendezvous_secret(RandomSecret());
  st.clear_placement();
  st.clear_per_rank_peak_memory_bytes();
  st.set_total_steps(spec.train().steps());
  for (const RankPlan& r : plan.ranks) {
    RankPlacement* p = st.add_placement();
    p->set_rank(r.rank);
    p->set_worker_id(r.worker_id);
    p->set_node_name(r.node_name);
    p->set_slot_index(r.slot_index);
    p->set_local_rank(r.local_rank);
    p->set_shard_group(r.shard_group);
    p->set_replicate_group(r.replicate_group);
    st.add_per_rank_peak_memory_bytes(0);
  }
  rendezvous_.Open(Namespace(job.rec), job.rec.rendezvous_secret());
  PushStartsLocked(job, "", nullptr);
  SL_LOG(INFO) << "job " << job_id << " attempt " << st.attempt() << ": " << reason;
  counters_.attempts_started++;
  Changed(job);
  return absl::OkStatus();
}

void CoordinatorCore::EndAttemptLocked(Job& job, bool send_stop) {
  const JobStatus& st = job.rec.status();
  for (const RankPlacement& p : st.placement()) {
    running_ranks_[p.worker_id()].erase({st.job_id(), p.rank()});
  }
  if (send_stop) {
    std::set<std::string> workers;
    for (const RankPlacement& p : st.placement()) workers.insert(p.worker_id());
    for (const std::string& w : workers) {
      Assignment stop;
      stop.set_action(Assignment::STOP);
      stop.set_job_id(st.job_id());
      stop.set_attempt(st.attempt());
      stop.set_grace_period_s(options_.stop_grace_period_s);
      Push(w, std::move(stop));
    }
  }
  registry_.ReleaseJob(st.job_id());
  rendezvous_.Close(Namespace(job.rec));
  dirty_namespaces_.insert(Namespace(job.rec));  // waiting Gets end (ABORTED)
  changed_.SignalAll();
}

void CoordinatorCore::FailAttemptLocked(Job& job, const std::string& kind,
                                        const std::string& reason) {
  EndAttemptLocked(job, /*send_stop=*/true);
  auto restarting = JobStateMachine(&job.rec, clock_->Now()).FailAttempt(kind, reason);
  if (!restarting.ok()) {
    SL_LOG(ERROR) << restarting.status();
    return;
  }
  counters_.attempts_failed++;
  if (*restarting) counters_.restarts++;
  SL_LOG(WARNING) << "job " << job.rec.status().job_id() << " attempt "
                  << job.rec.status().attempt() << " failed (" << kind << "): " << reason
                  << (*restarting ? "; restarting" : "; no restarts left");
  Changed(job);
}

void CoordinatorCore::Tick() {
  const std::vector<std::string> dead = registry_.ReapDead();
  for (const std::string& w : dead) PersistWorker(w);
  absl::MutexLock lock(&mu_);
  for (const std::string& worker_id : dead) {
    outboxes_.erase(worker_id);  // its stream ends (ABORTED) at its next look
    dirty_workers_.insert(worker_id);
    running_ranks_.erase(worker_id);
    auto info = registry_.Get(worker_id);
    const std::string node = info.ok() ? info->node_name() : "?";
    SL_LOG(WARNING) << "worker " << worker_id << " (" << node << ") missed heartbeats for "
                    << absl::FormatDuration(options_.heartbeat_timeout) << "; declared dead";
    for (auto& [id, job] : jobs_) {
      if (job.rec.status().state() != RUNNING) continue;
      std::vector<int32_t> lost;
      for (const RankPlacement& p : job.rec.status().placement()) {
        if (p.worker_id() == worker_id) lost.push_back(p.rank());
      }
      if (lost.empty()) continue;
      FailAttemptLocked(
          job, "WORKER_LOST",
          absl::StrCat("worker ", worker_id, " (node ", node, ") missed heartbeats for ",
                       absl::FormatDuration(options_.heartbeat_timeout), "; ranks [",
                       absl::StrJoin(lost, ", "), "] lost"));
    }
  }
  // Ranks whose START was never acknowledged in time.
  const int64_t now_ms = absl::ToUnixMillis(clock_->Now());
  const int64_t limit_ms = absl::ToInt64Milliseconds(options_.rank_start_timeout);
  for (auto& [id, job] : jobs_) {
    const JobStatus& st = job.rec.status();
    if (st.state() != RUNNING || now_ms - st.started_unix_ms() <= limit_ms ||
        static_cast<int>(job.acked.size()) >= st.placement_size()) {
      continue;
    }
    std::vector<std::string> missing;
    for (const RankPlacement& p : st.placement()) {
      if (!job.acked.count(p.rank())) {
        missing.push_back(absl::StrCat(p.rank(), " (", p.node_name(), ")"));
      }
    }
    FailAttemptLocked(
        job, "RANK_START_TIMEOUT",
        absl::StrCat("ranks [", absl::StrJoin(missing, ", "),
                     "] were not reported by their workers within ",
                     absl::FormatDuration(options_.rank_start_timeout), " of the attempt's start"));
  }
  ScheduleLocked();
}

CoordinatorCore::Counters CoordinatorCore::counters() const {
  absl::MutexLock lock(&mu_);
  Counters c = counters_;
  for (const auto& [id, job] : jobs_) c.jobs_by_state[job.rec.status().state()]++;
  return c;
}

bool CoordinatorCore::WaitDirty(absl::Duration wait, Dirty* dirty) {
  absl::MutexLock lock(&mu_);
  const absl::Time deadline = absl::Now() + wait;
  while (!shutdown_ && dirty_workers_.empty() && dirty_jobs_.empty() && dirty_namespaces_.empty()) {
    if (changed_.WaitWithDeadline(&mu_, deadline)) break;
  }
  dirty->workers.assign(dirty_workers_.begin(), dirty_workers_.end());
  dirty->jobs.assign(dirty_jobs_.begin(), dirty_jobs_.end());
  dirty->namespaces.assign(dirty_namespaces_.begin(), dirty_namespaces_.end());
  dirty_workers_.clear();
  dirty_jobs_.clear();
  dirty_namespaces_.clear();
  return !shutdown_;
}

void CoordinatorCore::Shutdown() {
  absl::MutexLock lock(&mu_);
  shutdown_ = true;
  changed_.SignalAll();
}

// ------------------------------------------------------------------------------- rendezvous

absl::Status CoordinatorCore::RendezvousSet(const RendezvousSetRequest& req) {
  absl::Status s = rendezvous_.Set(req.namespace_(), req.secret(), req.key(), req.value());
  if (s.ok()) {
    absl::MutexLock lock(&mu_);
    dirty_namespaces_.insert(req.namespace_());
    changed_.SignalAll();
  }
  return s;
}

absl::Duration CoordinatorCore::RendezvousWait(const RendezvousGetRequest& req) const {
  return std::min(absl::Milliseconds(std::max(0, req.timeout_ms())), options_.max_rendezvous_wait);
}

absl::StatusOr<RendezvousGetResponse> CoordinatorCore::RendezvousPoll(
    const RendezvousGetRequest& req, absl::Duration waited) {
  std::vector<std::string> keys(req.keys().begin(), req.keys().end());
  auto values = rendezvous_.Get(req.namespace_(), req.secret(), keys, absl::ZeroDuration(), waited);
  if (!values.ok()) return values.status();
  RendezvousGetResponse resp;
  for (std::string& v : *values) resp.add_values(std::move(v));
  return resp;
}

absl::StatusOr<RendezvousGetResponse> CoordinatorCore::RendezvousGet(
    const RendezvousGetRequest& req) {
  if (req.timeout_ms() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("timeout_ms: must be >= 0, got ", req.timeout_ms()));
  }
  const absl::Duration wait =
      std::min(absl::Milliseconds(req.timeout_ms()), options_.max_rendezvous_wait);
  std::vector<std::string> keys(req.keys().begin(), req.keys().end());
  auto values = rendezvous_.Get(req.namespace_(), req.secret(), keys, wait);
  if (!values.ok()) return values.status();
  RendezvousGetResponse resp;
  for (std::string& v : *values) resp.add_values(std::move(v));
  return resp;
}

// ------------------------------------------------------------------------------- reports

absl::StatusOr<CoordinatorCore::Job*> CoordinatorCore::FindRunningRankLocked(
    const std::string& job_id, int32_t attempt, int32_t rank) {
  Job* job = FindJob(job_id);
  if (job == nullptr) return absl::NotFoundError(absl::StrCat("unknown job ", job_id));
  const JobStatus& st = job->rec.status();
  if (st.state() != RUNNING || attempt != st.attempt()) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id, " attempt ", attempt, " is not running (job is ",
                     JobState_Name(st.state()), " at attempt ", st.attempt(), ")"));
  }
  if (rank < 0 || rank >= st.world_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank: ", rank, " outside world of ", st.world_size()));
  }
  return job;
}

absl::Status CoordinatorCore::ReportProgress(const ProgressReport& r) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Job * job, FindRunningRankLocked(r.job_id(), r.attempt(), r.rank()));
  if (r.step() < 0 || r.peak_memory_bytes() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("progress report: step and peak_memory_bytes must be >= 0, got step ",
                     r.step(), ", peak_memory_bytes ", r.peak_memory_bytes()));
  }
  JobStatus& st = *job->rec.mutable_status();
  if (st.per_rank_peak_memory_bytes_size() != st.world_size()) {
    st.mutable_per_rank_peak_memory_bytes()->Resize(st.world_size(), 0);
  }
  const bool memory_grew = r.peak_memory_bytes() > st.per_rank_peak_memory_bytes(r.rank());
  if (memory_grew) st.set_per_rank_peak_memory_bytes(r.rank(), r.peak_memory_bytes());
  if (r.rank() == 0) {
    st.set_step(r.step());
    st.set_loss(r.loss());
    st.set_tokens_per_s(r.tokens_per_s());
    const int64_t left = std::max<int64_t>(0, st.total_steps() - r.step());
    st.set_eta_s(r.step_time_s() * static_cast<double>(left));
    if (!std::isnan(r.val_loss()) && r.val_loss() != 0) st.set_val_loss(r.val_loss());
    if (!r.sample().empty()) st.set_sample(r.sample());
    Changed(*job);  // persisted: rank 0 reports only every log_every steps
  } else if (memory_grew) {
    // Other ranks only contribute their memory; watchers hear of it when it grows.
    job->version = next_version_++;
    dirty_jobs_.insert(r.job_id());
    changed_.SignalAll();
  }
  return absl::OkStatus();
}

absl::Status CoordinatorCore::ReportCheckpoint(const CheckpointReport& r) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Job * job, FindRunningRankLocked(r.job_id(), r.attempt(), r.rank()));
  JobStatus& st = *job->rec.mutable_status();
  CheckpointRegistry::Layout layout;
  layout.world_size = st.world_size();
  layout.shard_degree = job->rec.shard_degree();
  layout.sharding_strategy = FsdpSpec::ShardingStrategy_Name(st.spec().fsdp().sharding_strategy());
  bool committed = false;
  auto rec = checkpoints_.Report(r, layout, clock_->Now(), &committed);
  if (!rec.ok()) return rec.status();
  if (store_) {
    if (absl::Status s = store_->PutCheckpoint(*rec); !s.ok()) return s;
  }
  if (committed) {
    st.set_latest_checkpoint_step(std::max(st.latest_checkpoint_step(), r.step()));
    JobStateMachine(&job->rec, clock_->Now())
        .Note("CHECKPOINT_COMMITTED", absl::StrCat("step ", r.step(), " at ", rec->info().path(),
                                                   " (", rec->files_size(), " data files)"));
    for (const auto& [jid, step] :
         checkpoints_.ApplyRetention(r.job_id(), st.spec().checkpoint().keep_last())) {
      if (store_) (void)store_->DeleteCheckpoint(jid, step);
    }
    Changed(*job);
  }
  return absl::OkStatus();
}

// ------------------------------------------------------------------------------- jobs

absl::StatusOr<std::string> CoordinatorCore::SubmitJob(const JobSpec& spec) {
  if (absl::Status s = BasicSpecChecks(spec); !s.ok()) return s;
  if (options_.validate_spec) {
    if (absl::Status s = options_.validate_spec(spec); !s.ok()) return s;
  }
  absl::MutexLock lock(&mu_);
  if (shutdown_) return absl::UnavailableError("coordinator is shutting down");
  Job job;
  job.rec.set_seq(next_seq_);
  JobStatus& st = *job.rec.mutable_status();
  st.set_job_id(absl::StrCat("job-", next_seq_));
  *st.mutable_spec() = spec;
  st.set_world_size(spec.world_size());
  st.set_total_steps(spec.train().steps());
  if (absl::Status s = JobStateMachine(&job.rec, clock_->Now()).Submit(); !s.ok()) return s;
  if (store_) {
    if (absl::Status s = store_->PutJob(job.rec); !s.ok()) return s;
  }
  next_seq_++;
  const std::string id = st.job_id();
  Job& stored = jobs_[id] = std::move(job);
  stored.version = next_version_++;
  dirty_jobs_.insert(id);
  SL_LOG(INFO) << "job " << id << " (" << spec.name() << ", W=" << spec.world_size()
               << ") submitted";
  changed_.SignalAll();
  ScheduleLocked();
  return id;
}

absl::StatusOr<JobStatus> CoordinatorCore::GetJob(const std::string& job_id) const {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("unknown job ", job_id));
  return it->second.rec.status();
}

std::vector<JobStatus> CoordinatorCore::ListJobs(const std::vector<JobState>& states) const {
  absl::MutexLock lock(&mu_);
  std::vector<const Job*> sel;
  for (const auto& [id, job] : jobs_) {
    if (states.empty() ||
        std::find(states.begin(), states.end(), job.rec.status().state()) != states.end()) {
      sel.push_back(&job);
    }
  }
  std::sort(sel.begin(), sel.end(),
            [](const Job* a, const Job* b) { return a->rec.seq() < b->rec.seq(); });
  std::vector<JobStatus> out;
  for (const Job* j : sel) out.push_back(j->rec.status());
  return out;
}

absl::Status CoordinatorCore::CancelJob(const std::string& job_id, const std::string& reason) {
  absl::MutexLock lock(&mu_);
  Job* job = FindJob(job_id);
  if (job == nullptr) return absl::NotFoundError(absl::StrCat("unknown job ", job_id));
  const std::string why = reason.empty() ? "cancelled by a user" : reason;
  JobStateMachine sm(&job->rec, clock_->Now());
  if (!IsLegalTransition(job->rec.status().state(), CANCELLED)) return sm.Cancel(why);
  if (job->rec.status().state() == RUNNING) EndAttemptLocked(*job, /*send_stop=*/true);
  if (absl::Status s = sm.Cancel(why); !s.ok()) return s;
  SL_LOG(INFO) << "job " << job_id << " cancelled: " << why;
  Changed(*job);
  ScheduleLocked();
  return absl::OkStatus();
}

absl::StatusOr<JobStatus> CoordinatorCore::WaitJob(const std::string& job_id, int64_t after_version,
                                                   absl::Duration wait, int64_t* version) const {
  absl::MutexLock lock(&mu_);
  const absl::Time deadline = absl::Now() + wait;
  while (true) {
    auto it = jobs_.find(job_id);
    if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("unknown job ", job_id));
    if (it->second.version > after_version || shutdown_) {
      *version = it->second.version;
      if (shutdown_ && it->second.version <= after_version) {
        return absl::UnavailableError("coordinator is shutting down");
      }
      return it->second.rec.status();
    }
    if (changed_.WaitWithDeadline(&mu_, deadline)) {
      *version = it->second.version;
      return it->second.rec.status();
    }
  }
}

absl::StatusOr<std::optional<JobStatus>> CoordinatorCore::JobIfNewer(const std::string& job_id,
                                                                     int64_t after_version,
                                                                     int64_t* version) const {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("unknown job ", job_id));
  *version = it->second.version;
  if (it->second.version > after_version) return std::optional<JobStatus>(it->second.rec.status());
  if (shutdown_) return absl::UnavailableError("coordinator is shutting down");
  return std::optional<JobStatus>();
}

// ------------------------------------------------------------------------------- checkpoints

absl::StatusOr<std::vector<CheckpointInfo>> CoordinatorCore::ListCheckpoints(
    const std::string& job_id) const {
  absl::MutexLock lock(&mu_);
  if (!jobs_.count(job_id)) return absl::NotFoundError(absl::StrCat("unknown job ", job_id));
  return checkpoints_.List(job_id);
}

absl::StatusOr<GetCheckpointResponse> CoordinatorCore::GetCheckpoint(const std::string& job_id,
                                                                     int64_t step) const {
  GetCheckpointResponse resp;
  {
    absl::MutexLock lock(&mu_);
    auto info = checkpoints_.Get(job_id, step);
    if (!info.ok()) return info.status();
    *resp.mutable_info() = *info;
  }
  std::ifstream in(resp.info().path() + "/MANIFEST.json");
  if (in) {
    std::stringstream text;
    text << in.rdbuf();
    google::protobuf::util::JsonParseOptions opts;
    opts.ignore_unknown_fields = true;
    if (!google::protobuf::util::JsonStringToMessage(text.str(), resp.mutable_manifest(), opts)
             .ok()) {
      resp.clear_manifest();
    }
  }
  return resp;
}

}  // namespace shardline::coordinator
