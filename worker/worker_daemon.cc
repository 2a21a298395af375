#include "worker/worker_daemon.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/logging.h"
#include "common/network_interface.h"
#include "common/secrets.h"
#include "common/status_macros.h"
#include "launch/env_names.h"
#include "launch/exit_codes.h"
#include "launch/rank_env.h"
#include "spec/job_spec.h"
#include "worker/rank_files.h"
#include "worker/trainer_env.h"

namespace shardline::worker {
namespace {

namespace fs = std::filesystem;

constexpr char kVersion[] = "shardline-worker 0.1";
// How long an exited rank stays in heartbeats, so its exit reaches a coordinator that was
// briefly unreachable.
constexpr absl::Duration kKeepExited = absl::Minutes(2);
// How long an exited rank's EXITED waits for its last log lines to reach the coordinator.
constexpr absl::Duration kLogDrainWait = absl::Seconds(5);
// Log bytes per rank and per ShipLogs call (gRPC refuses messages over 4 MiB by default).
constexpr size_t kShipBytesPerRank = 256 << 10;
constexpr size_t kShipBytesPerCall = 2 << 20;

// A client of the coordinator as this daemon talks to it (join token, TLS and this node's
// client certificate, per-call deadline).
absl::StatusOr<std::unique_ptr<client::CoordinatorClient>> NewClient(const WorkerOptions& o) {
  client::CoordinatorClient::Options co;
  co.address = o.coordinator_address;
  co.token = o.join_token;
  co.timeout = o.rpc_timeout;
  RETURN_IF_ERROR(client::LoadClientTls(o.tls, client::kClientTlsFlags, &co));
  return client::CoordinatorClient::Create(co);
}

}  // namespace

absl::StatusOr<std::unique_ptr<WorkerDaemon>> WorkerDaemon::Create(const WorkerOptions& options) {
  if (options.coordinator_address.empty()) {
    return absl::InvalidArgumentError("--coordinator: the coordinator's host:port is required");
  }
  if (options.node_name.empty()) return absl::InvalidArgumentError("--node_name is empty");
  if (options.work_dir.empty()) return absl::InvalidArgumentError("--work_dir is required");
  if (access(options.trainer_path.c_str(), X_OK) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--trainer: ", options.trainer_path, " is not an executable file"));
  }
  std::error_code ec;
  fs::create_directories(options.work_dir, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat("--work_dir: cannot create ", options.work_dir, ": ", ec.message()));
  }
  // Before any thread exists (the client starts gRPC's): the check forks.
  std::optional<TrainerUser> trainer_user;
  if (!options.trainer_user.empty()) {
    ASSIGN_OR_RETURN(trainer_user, ResolveTrainerUser(options.trainer_user));
    RETURN_IF_ERROR(CheckTrainerUser(
        *trainer_user, {options.trainer_path, options.work_dir,
                        options.path_policy.checkpoint_roots, options.credential_files}));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<client::CoordinatorClient> client, NewClient(options));
  auto daemon = std::unique_ptr<WorkerDaemon>(new WorkerDaemon(options, std::move(client)));
  daemon->trainer_user_ = std::move(trainer_user);
  // The GPUs this daemon was given (an allocation's, a container's), if any; ranks get entries
  // of this list, never indices of GPUs outside it.
  ASSIGN_OR_RETURN(daemon->visible_devices_,
                   ParseVisibleDevices(GetEnv(launch::kCudaVisibleDevicesEnv)));
  TrainerEnvNode& node = daemon->trainer_env_node_;
  node.coordinator_address = options.coordinator_address;
  node.advertise_address = options.advertise_address;
  node.node_name = options.node_name;
  node.path_policy = options.path_policy;
  node.visible_devices = daemon->visible_devices_;
  node.inherited_nccl_ifname = GetEnv(launch::kNcclSocketIfnameEnv);
  node.inherited_device_order = GetEnv(launch::kCudaDeviceOrderEnv);
  if (absl::StatusOr<std::string> ifname = InterfaceForAddress(options.advertise_address);
      ifname.ok()) {
    node.nccl_ifname = *ifname;
  } else if (!options.advertise_address.empty()) {
    SL_LOG(INFO) << "NCCL picks its own network interface: " << ifname.status().message();
  }
  if (daemon->DiscoverSlots().empty()) {
    return absl::InvalidArgumentError(
        daemon->visible_devices_.has_value() && daemon->visible_devices_->empty()
            ? "no slots: CUDA_VISIBLE_DEVICES names no GPU and --slots is 0"
            : "no slots: no GPU found and --slots is 0");
  }
  return daemon;
}

WorkerDaemon::WorkerDaemon(WorkerOptions options, std::unique_ptr<client::CoordinatorClient> client)
    : options_(std::move(options)), client_(std::move(client)) {
  // Presented at the first registration: if its answer is lost (a connection left half-open by
  // a partition), the retry presents it again and the coordinator lets this daemon in at once
  // (WorkerRegistry's predecessor credential) rather than after the node's heartbeat timeout.
  // It opens nothing else: the coordinator's own credential replaces it at the answer.
  absl::MutexLock lock(&mu_);
  worker_credential_ = RandomSecret();
  client_->SetWorkerCredential(worker_credential_);
}

WorkerDaemon::~WorkerDaemon() { Shutdown(); }

std::vector<Slot> WorkerDaemon::DiscoverSlots() const {
  std::vector<Slot> slots;
  // NVIDIA's driver lists one directory per GPU, named by PCI bus id; reading it needs no CUDA
  // library. Sorted: directory order is arbitrary, bus order is CUDA's PCI_BUS_ID order.
  std::vector<std::string> models;
  std::error_code ec;
  const fs::path gpus("/proc/driver/nvidia/gpus");
  if (fs::is_directory(gpus, ec)) {
    std::vector<fs::path> dirs;
    for (const auto& entry : fs::directory_iterator(gpus, ec)) dirs.push_back(entry.path());
    std::sort(dirs.begin(), dirs.end());
    for (const fs::path& dir : dirs) {
      std::string model = "GPU";
      std::ifstream info(dir / "information");
      std::string line;
      while (std::getline(info, line)) {
        absl::string_view rest = line;
        if (absl::ConsumePrefix(&rest, "Model:")) {
          model = std::string(absl::StripAsciiWhitespace(rest));
        }
      }
      models.push_back(model);
    }
  }
  // An inherited CUDA_VISIBLE_DEVICES decides the slots, even on a node whose driver directory
  // is hidden (containers): the allocation knows which GPUs are ours.
  if (!models.empty() || (visible_devices_.has_value() && !visible_devices_->empty())) {
    const std::vector<std::string> names = GpuSlotNames(visible_devices_, models);
    for (size_t i = 0; i < names.size(); ++i) {
      Slot s;
      s.set_kind(Slot::CUDA);
      s.set_index(static_cast<int>(i));
      s.set_device_name(names[i]);
      slots.push_back(s);
    }
  }
  if (slots.empty()) {
    for (int i = 0; i < options_.cpu_slots; ++i) {
      Slot s;
      s.set_kind(Slot::CPU);
      s.set_index(i);
      s.set_device_name("cpu");
      slots.push_back(s);
    }
  }
  return slots;
}

absl::Status WorkerDaemon::Register() {
  RegisterWorkerRequest req;
  req.set_node_name(options_.node_name);
  req.set_address(options_.advertise_address);
  req.set_version(kVersion);
  for (const Slot& s : DiscoverSlots()) *req.add_slots() = s;
  // The client keeps the response's worker credential for the heartbeats.
  ASSIGN_OR_RETURN(RegisterWorkerResponse resp, client_->RegisterWorker(req));
  absl::MutexLock lock(&mu_);
  worker_id_ = resp.worker_id();
  worker_credential_ = resp.worker_credential();
  registered_ = true;
  if (resp.heartbeat_interval_ms() > 0) {
    heartbeat_interval_ = absl::Milliseconds(resp.heartbeat_interval_ms());
  }
  SL_LOG(INFO) << "registered as " << worker_id_ << " with " << req.slots_size() << " slot(s)";
  return absl::OkStatus();
}

absl::Status WorkerDaemon::Run() {
  std::thread stopper([this] { StopLoop(); });
  std::thread supervisor([this] { SuperviseLoop(); });
  std::thread heartbeat([this] { HeartbeatLoop(); });
  absl::Duration backoff = absl::Milliseconds(100);
  while (!shutdown_.load()) {
    absl::Status s = Register();
    if (s.ok()) {
      backoff = absl::Milliseconds(100);
      s = ServeAssignments();
    }
    if (shutdown_.load()) break;
    // Heartbeats go on under the known worker id meanwhile: a coordinator restarted from its
    // state knows this worker and must hear from it within its heartbeat timeout, or it fails
    // the worker's ranks. Only a `reregister` answer drops the id.
    SL_LOG(WARNING) << "coordinator connection lost (" << s << "); retrying in " << backoff;
    relay_.CoordinatorLost();  // it may restart without the progress it had not made durable
    for (absl::Time until = absl::Now() + backoff; absl::Now() < until && !shutdown_.load();) {
      absl::SleepFor(absl::Milliseconds(20));
    }
    backoff = std::min(backoff * 2, options_.max_backoff);
  }
  heartbeat.join();
  supervisor.join();
  StopAllAndEndStopLoop();
  stopper.join();
  absl::MutexLock lock(&mu_);
  ranks_.clear();
  return absl::OkStatus();
}

void WorkerDaemon::Shutdown() {
  shutdown_.store(true);
  absl::MutexLock lock(&mu_);
  if (stream_client_ != nullptr) stream_client_->CancelStreams();
}

absl::Status WorkerDaemon::ServeAssignments() {
  ASSIGN_OR_RETURN(std::shared_ptr<client::CoordinatorClient> stream_client, NewClient(options_));
  std::string worker_id;
  {
    absl::MutexLock lock(&mu_);
    worker_id = worker_id_;
    stream_client->SetWorkerCredential(worker_credential_);
    stream_client_ = stream_client;
  }
  if (shutdown_.load()) return absl::OkStatus();
  // The stream stays open for the worker's lifetime; it ends when the coordinator goes away,
  // or when a heartbeat answer asks for re-registration (CancelStreams).
  const absl::Status s = stream_client->StreamAssignments(worker_id, [this](const Assignment& a) {
    HandleAssignment(a);
    return !shutdown_.load();
  });
  {
    absl::MutexLock lock(&mu_);
    stream_client_.reset();
  }
  if (s.ok() && !shutdown_.load()) {
    return absl::UnavailableError("StreamAssignments: the coordinator closed the stream");
  }
  return s;
}

void WorkerDaemon::HandleAssignment(const Assignment& a) {
  const absl::Duration grace =
      a.grace_period_s() > 0 ? absl::Seconds(a.grace_period_s()) : options_.grace_period;
  const std::string& job_id = a.job_id();
  const int attempt = a.attempt();
  const int rank = a.rank();
  // Nothing here waits for a rank: this thread reads the stream, and the next assignment (a
  // STOP of another attempt or rank) must be acted on when it arrives, not a grace period later.
  absl::MutexLock lock(&mu_);
  if (a.action() == Assignment::STOP) {
    SL_LOG(INFO) << "stop " << job_id << " attempt " << attempt << ": SIGTERM, SIGKILL after "
                 << absl::FormatDuration(grace);
    StopWhereLocked(
        [&](const RankKey& key) {
          return std::get<0>(key) == job_id && (attempt <= 0 || std::get<1>(key) == attempt);
        },
        grace);
    return;
  }
  // Rank `rank` of the attempt where its generation is <= `generation`.
  auto rank_up_to = [&](int generation) {
    return [&job_id, attempt, rank, generation](const RankKey& key) {
      return std::get<0>(key) == job_id && std::get<1>(key) == attempt &&
             std::get<2>(key) == rank && std::get<3>(key) <= generation;
    };
  };
  if (a.action() == Assignment::STOP_RANK) {
    SL_LOG(INFO) << "stop rank " << rank << " (generation " << a.generation() << " or older) of "
                 << job_id << " attempt " << attempt << ": SIGTERM, SIGKILL after "
                 << absl::FormatDuration(grace);
    StopWhereLocked(rank_up_to(a.generation()), grace);
    return;
  }
  if (a.action() == Assignment::PREEMPT) {
    int signalled = 0;
    for (auto& [key, r] : ranks_) {
      if (std::get<0>(key) != job_id || std::get<1>(key) != attempt || r.process == nullptr ||
          r.process->Poll().has_value()) {
        continue;
      }
      r.process->Preempt();
      ++signalled;
    }
    SL_LOG(INFO) << "preempt " << job_id << " attempt " << attempt << ": SIGUSR1 to " << signalled
                 << " rank(s) (save a checkpoint at the next step, then wait for the STOP)";
    return;
  }
  if (a.action() != Assignment::START) return;
  // A START delivered just before a stream broke is sent again on the new stream; the rank
  // already runs (or ran, or waits to run) here, so a second trainer must not start. Only a
  // newer generation (a replacement) starts the rank again.
  std::optional<int> older = NewestGenerationLocked(job_id, attempt, rank);
  for (const Assignment& d : deferred_starts_) {
    if (d.job_id() == job_id && d.attempt() == attempt && d.rank() == rank) {
      older = std::max(older.value_or(d.generation()), d.generation());
    }
  }
  if (older.has_value() && *older >= a.generation()) {
    SL_LOG(INFO) << "ignoring repeated START of rank " << rank << " (generation " << a.generation()
                 << ", generation " << *older << " ran here) of " << job_id << " attempt "
                 << attempt;
    return;
  }
  if (older.has_value()) {
    // Two generations of a rank must never run at once (they would share its rendezvous keys
    // and its slot): the older one goes first, if it still runs; the new one starts once it
    // has ended (SuperviseLoop), without holding up the stream meanwhile.
    SL_LOG(INFO) << "rank " << rank << " of " << job_id << " attempt " << attempt << ": generation "
                 << a.generation() << " replaces generation " << *older;
    StopWhereLocked(rank_up_to(a.generation() - 1), grace);
    if (OlderGenerationRunsLocked(a)) {
      deferred_starts_.push_back(a);
      return;
    }
  }
  StartOrReportLocked(a);
}

void WorkerDaemon::StartOrReportLocked(const Assignment& a) {
  const absl::Status s = StartRankLocked(a);
  if (s.ok()) return;
  SL_LOG(ERROR) << "cannot start rank " << a.rank() << " of " << a.job_id() << ": " << s;
  // Report it as exited so the coordinator fails the attempt instead of waiting forever.
  Rank& r = ranks_[RankKey{a.job_id(), a.attempt(), a.rank(), a.generation()}];
  r.assignment = a;
  r.status.set_job_id(a.job_id());
  r.status.set_attempt(a.attempt());
  r.status.set_rank(a.rank());
  r.status.set_generation(a.generation());
  r.status.set_state(RankStatus::EXITED);
  // The trainer's "bad job spec" when this node's path policy refused the spec.
  r.status.set_exit_code(absl::IsPermissionDenied(s) ? launch::kExitBadSpec : 127);
  r.status.set_log_tail(std::string(s.message()));
  r.exited_at = absl::Now();
}

bool WorkerDaemon::OlderGenerationRunsLocked(const Assignment& a) {
  for (auto& [key, r] : ranks_) {
    if (std::get<0>(key) == a.job_id() && std::get<1>(key) == a.attempt() &&
        std::get<2>(key) == a.rank() && std::get<3>(key) < a.generation() && r.process != nullptr &&
        !r.process->Poll().has_value()) {
      return true;
    }
  }
  return false;
}

void WorkerDaemon::StartDeferredLocked() {
  for (size_t i = 0; i < deferred_starts_.size();) {
    if (OlderGenerationRunsLocked(deferred_starts_[i])) {
      ++i;
      continue;
    }
    const Assignment a = std::move(deferred_starts_[i]);
    deferred_starts_.erase(deferred_starts_.begin() + i);
    StartOrReportLocked(a);
  }
}

std::optional<int> WorkerDaemon::NewestGenerationLocked(const std::string& job_id, int attempt,
                                                        int rank) const {
  std::optional<int> newest;
  for (auto it =
           ranks_.lower_bound(RankKey{job_id, attempt, rank, std::numeric_limits<int>::min()});
       it != ranks_.end() && std::get<0>(it->first) == job_id &&
       std::get<1>(it->first) == attempt && std::get<2>(it->first) == rank;
       ++it) {
    newest = std::get<3>(it->first);  // ascending: the last one is the newest
  }
  return newest;
}

absl::Status WorkerDaemon::StartRankLocked(const Assignment& a) {
  // The coordinator checked the paths against its roots; this node's roots and links decide.
  RETURN_IF_ERROR(
      spec::CheckSpecPaths(a.spec(), options_.path_policy, /*resolve_links=*/true, a.job_id()));
  const std::string job_dir = absl::StrCat(options_.work_dir, "/jobs/", a.job_id());
  const std::string dir = absl::StrCat(job_dir, "/attempt-", a.attempt());
  const RankFiles files = RankFilesFor(dir, a.rank(), a.generation());
  RETURN_IF_ERROR(
      PrepareRankFiles(job_dir, dir, files, spec::JobSpecToYaml(a.spec()), trainer_user_));
  const std::string& spec_path = files.spec;
  const std::string& metrics_path = files.metrics;

  RankProcess::Options po;
  po.argv = {options_.trainer_path, "--spec=" + spec_path, "--metrics_out=" + metrics_path};
  po.log_path = files.log;
  po.log_max_file_bytes = options_.rank_log_max_file_bytes;
  po.working_dir = dir;
  po.user = trainer_user_;
  // The trainer's launch environment (launch/rank_env.h), written by its one writer.
  ASSIGN_OR_RETURN(const launch::RankEnv env, TrainerEnvFor(a, trainer_env_node_));
  ASSIGN_OR_RETURN(po.env, launch::WriteRankEnv(env));
  // Trainers connect with the CA only: their calls (rendezvous, reports) are not worker calls,
  // so they need no client certificate, and the node's key stays with the daemon.
  po.env.merge(client::ClientTlsEnv({options_.tls.ca, "", "", options_.tls.insecure}));
  // The daemon's own secrets stay with it (its environment may hold them: worker_main reads
  // $SHARDLINE_JOIN_TOKEN, and a shell may export a user's $SHARDLINE_TOKEN); so do its roots,
  // which the trainer gets only as this node's path policy says (trainer_env.h).
  po.drop_env = {launch::kJoinTokenEnv, launch::kUserTokenEnv, launch::kOpenRootsEnv,
                 launch::kWriteRootsEnv};
  ASSIGN_OR_RETURN(std::unique_ptr<RankProcess> process, RankProcess::Start(po));
  SL_LOG(INFO) << "started rank " << a.rank() << "/" << a.world_size() << " of " << a.job_id()
               << " attempt " << a.attempt() << " (pid " << process->pid() << ", generation "
               << a.generation() << ", log " << po.log_path << ")";
  Rank& r = ranks_[RankKey{a.job_id(), a.attempt(), a.rank(), a.generation()}];
  r.assignment = a;
  r.process = std::move(process);
  r.metrics = std::make_unique<MetricsTail>(metrics_path);
  r.status.set_job_id(a.job_id());
  r.status.set_attempt(a.attempt());
  r.status.set_rank(a.rank());
  r.status.set_generation(a.generation());
  r.status.set_state(RankStatus::RUNNING);
  return absl::OkStatus();
}

void WorkerDaemon::SuperviseLoop() {
  while (!shutdown_.load()) {
    // Exits are detected first and published only after the metrics written before them are
    // relayed: a heartbeat saying "exited" may end the job, after which the coordinator refuses
    // progress for it, so the last step (and the sample) must reach it first.
    std::vector<std::pair<RankKey, int>> exits;
    {
      absl::MutexLock lock(&mu_);
      for (auto it = ranks_.begin(); it != ranks_.end();) {
        Rank& r = it->second;
        if (r.process != nullptr && r.status.state() != RankStatus::EXITED) {
          if (std::optional<int> code = r.process->Poll(); code.has_value()) {
            exits.emplace_back(it->first, *code);
          }
        }
        std::vector<ProgressReport> fresh =
            r.metrics != nullptr ? r.metrics->Poll() : std::vector<ProgressReport>();
        for (ProgressReport& p : fresh) {
          p.set_job_id(r.assignment.job_id());
          p.set_attempt(r.assignment.attempt());
          p.set_rank(r.assignment.rank());
          relay_.Add({it->first, std::move(p), r.assignment.rendezvous_secret()});
        }
        if (absl::Now() - r.exited_at > kKeepExited) {
          relay_.Forget(it->first);
          it = ranks_.erase(it);
        } else {
          ++it;
        }
      }
      // Replacements whose older generation has ended since.
      StartDeferredLocked();
    }
    // Unsent reports (the coordinator was down or stopped) go again, in order, before the fresh
    // ones, and after the coordinator was lost so do those it took but had not made durable
    // (progress_relay.h; only the latest unsent one was kept, and the chaos soak (#30) found
    // every outage's steps missing from `shardctl metrics`, then a SIGKILL's unflushed ones).
    std::vector<ProgressRelay::Report> reports = relay_.Take();
    if (!reports.empty()) SL_LOG(DEBUG) << "relaying " << reports.size() << " progress report(s)";
    bool coordinator_down = false;
    int refused = 0;  // logged once a round: after an outage a whole backlog may be refused
    for (ProgressRelay::Report& relay : reports) {
      if (!coordinator_down) {
        ReportProgressResponse resp;
        const absl::Status s = client_->ReportProgress(relay.report, relay.credential, &resp);
        if (s.ok()) {
          relay_.Acknowledged(std::move(relay), resp.durable_step());
          continue;
        }
        if (!absl::IsUnavailable(s) && !absl::IsDeadlineExceeded(s)) {
          if (refused++ == 0) SL_LOG(WARNING) << s;
          continue;
        }
        coordinator_down = true;  // keep this one and the rest, in order, for the next round
        relay_.CoordinatorLost();
      }
      relay_.Unsent(std::move(relay));
    }
    if (refused > 1) SL_LOG(WARNING) << refused << " progress reports refused this round";
    ShipLogs();
    if (!exits.empty()) {
      absl::MutexLock lock(&mu_);
      for (const auto& [key, code] : exits) {
        auto it = ranks_.find(key);
        // A rank whose last report has not got through yet stays RUNNING until it has.
        if (it == ranks_.end() || relay_.HasUnsent(key)) continue;
        Rank& r = it->second;
        // So do its last log lines, for a while: `shardctl logs` after the job ended has them.
        if (r.exit_seen == absl::InfiniteFuture()) r.exit_seen = absl::Now();
        if (!r.process->log()->Drained() && absl::Now() - r.exit_seen < kLogDrainWait) continue;
        r.status.set_state(RankStatus::EXITED);
        r.status.set_exit_code(code);
        if (code != 0) r.status.set_log_tail(r.process->LogTail(4096));
        r.exited_at = absl::Now();
        heartbeat_now_.store(true);
        SL_LOG(INFO) << "rank " << r.assignment.rank() << " of " << r.assignment.job_id() << " "
                     << (r.assignment.generation() > 0
                             ? absl::StrCat("(generation ", r.assignment.generation(), ") ")
                             : "")
                     << DescribeExit(code);
      }
    }
    absl::SleepFor(absl::Milliseconds(200));
  }
}

void WorkerDaemon::ShipLogs() {
  ShipLogsRequest req;
  std::vector<std::pair<RankLog*, RankLog::Pending>> shipped;
  {
    absl::MutexLock lock(&mu_);
    if (!registered_) return;
    req.set_worker_id(worker_id_);
    // ranks_ entries (and their RankLogs) are erased only by this thread (SuperviseLoop).
    size_t budget = kShipBytesPerCall;
    for (auto& [key, rank] : ranks_) {
      if (rank.process == nullptr || budget < kShipBytesPerRank) continue;  // next round
      RankLog::Pending p = rank.process->log()->Peek(kShipBytesPerRank);
      for (const std::string& l : p.lines) budget -= std::min(budget, l.size() + 16);
      if (p.lines.empty() && p.dropped == 0) continue;
      RankLogChunk* c = req.add_chunks();
      c->set_job_id(rank.assignment.job_id());
      c->set_attempt(rank.assignment.attempt());
      c->set_rank(rank.assignment.rank());
      c->set_time_unix_ms(p.time_unix_ms);
      c->set_dropped_lines(p.dropped);
      for (const std::string& l : p.lines) c->add_lines(l);
      shipped.emplace_back(rank.process->log(), std::move(p));
    }
  }
  if (shipped.empty()) return;
  const absl::Status s = client_->ShipLogs(req);
  if (absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s)) return;  // kept; sent again later
  if (!s.ok()) {
    SL_LOG(WARNING) << "log lines refused (dropped): " << s;
  }
  for (auto& [log, p] : shipped) log->Commit(p.lines.size(), p.dropped);
}

void WorkerDaemon::HeartbeatLoop() {
  while (!shutdown_.load()) {
    heartbeat_now_.store(false);  // This heartbeat carries every exit published before it.
    HeartbeatRequest req;
    absl::Duration interval;
    bool registered;
    std::string credential;
    {
      absl::MutexLock lock(&mu_);
      registered = registered_;
      interval = heartbeat_interval_;
      credential = worker_credential_;
      req.set_worker_id(worker_id_);
      for (auto it = ranks_.begin(); it != ranks_.end(); ++it) {
        // Per (job, attempt, rank) only the newest generation: an older one has ended (the
        // newer one started after it), and the coordinator tracks the newest.
        const auto next = std::next(it);
        if (next != ranks_.end() && std::get<0>(next->first) == std::get<0>(it->first) &&
            std::get<1>(next->first) == std::get<1>(it->first) &&
            std::get<2>(next->first) == std::get<2>(it->first)) {
          continue;
        }
        *req.add_ranks() = it->second.status;
      }
    }
    if (registered) {
      const absl::StatusOr<HeartbeatResponse> resp = client_->Heartbeat(req);
      if (resp.ok() && resp->reregister()) {
        SL_LOG(WARNING) << "coordinator asked to re-register";
        absl::MutexLock lock(&mu_);
        registered_ = false;
        if (stream_client_ != nullptr) stream_client_->CancelStreams();
      } else if (absl::IsPermissionDenied(resp.status())) {
        // The coordinator no longer takes this worker's credential (another registration of
        // the node, or a state without it): register again, unless that already happened
        // while this heartbeat was in flight.
        SL_LOG(WARNING) << resp.status() << "; registering again";
        absl::MutexLock lock(&mu_);
        if (worker_credential_ == credential) {
          registered_ = false;
          if (stream_client_ != nullptr) stream_client_->CancelStreams();
        }
      } else if (!resp.ok()) {
        SL_LOG(WARNING) << resp.status();
        relay_.CoordinatorLost();
      }
    }
    for (absl::Time until = absl::Now() + interval;
         absl::Now() < until && !shutdown_.load() && !heartbeat_now_.load();) {
      absl::SleepFor(absl::Milliseconds(20));
    }
  }
}

}  // namespace shardline::worker
