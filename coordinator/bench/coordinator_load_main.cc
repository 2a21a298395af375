// coordinator_load: how the coordinator holds up under many workers, and what training metrics
// cost it.
//
//   1. Planning time: PlanPlacement for --plan_ranks ranks on nodes of 8 slots, for several
//      shard degrees (median of 5 runs).
//   2. For each count in --workers: starts the real coordinator binary, registers that many
//      simulated workers, then has each heartbeat once a second (spread evenly over the second)
//      for --duration_s, from --threads client threads over --channels channels. Reports
//      heartbeat latency p50/p99/max, the achieved rate and the coordinator's CPU use (from
//      /proc/<pid>/stat), and the load tool's own CPU (both share this machine's cores).
//      With --jobs > 0 the same coordinator also runs that many one-rank jobs (their workers
//      list the ranks RUNNING in their heartbeats, as daemons do), and the heartbeat time is cut
//      into --phases alternating phases: without reports, then with each job's rank 0 sending
//      one ReportProgress a second with its attempt credential (the trainers' metrics path) and
//      /metrics scraped every --scrape_s, then without, ... Alternating in one process keeps
//      slow drift of the machine out of the comparison. One row per configuration, and the
//      ratio of their latencies (goal: p99 within 10%).
//   2b. --rendezvous_ranks: a large attempt's bootstrap Sets through the core, in memory and with
//      a state store (the values are journaled so a restarted coordinator reloads them).
//   3. --history_steps (a million): one job's series fed that many steps through the core's
//      ReportProgress; the points it stores, and the time and size of a GetJobMetrics response
//      (what shardctl metrics and a dashboard read) and of its JSON.
//
//   bazel run //coordinator/bench:coordinator_load -- --workers=1000,10000 --out=/tmp/load.txt
//   smaller machine: --workers=2000 --jobs=200 --history_steps=100000
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <deque>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cmath>
#include <ctime>
#include <filesystem>
#include <map>
#include <mutex>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"

#include "client/client.h"
#include "common/clock.h"
#include "coordinator/core/coordinator_core.h"
#include "coordinator/http/metrics.h"
#include "coordinator/observability/training_series.h"
#include "coordinator/placement/planner.h"
#include "coordinator/testing/coordinator_process.h"
#include "coordinator/testing/http_get.h"
#include "proto/coordinator.grpc.pb.h"

ABSL_FLAG(std::string, workers, "1000,10000", "simulated worker counts, comma separated");
ABSL_FLAG(int32_t, duration_s, 120,
          "heartbeat time per worker count (split into --phases when --jobs > 0)");
ABSL_FLAG(int32_t, threads, 32, "client threads issuing heartbeats");
ABSL_FLAG(int32_t, channels, 8, "gRPC channels the threads share");
ABSL_FLAG(bool, streams, true,
          "each simulated worker also holds its assignment stream open (async client)");
ABSL_FLAG(int32_t, jobs, 1000,
          "one-rank running jobs whose rank 0 reports a metrics point a second in every other "
          "phase (0: heartbeats only, one phase)");
ABSL_FLAG(int32_t, phases, 12, "alternating phases: without reports, with, without, ...");
ABSL_FLAG(int32_t, reporters, 8, "client threads sending the jobs' reports");
ABSL_FLAG(int32_t, scrape_s, 5, "in the phases with reports, GET /metrics this often (0: never)");
ABSL_FLAG(int64_t, history_steps, 1000000,
          "steps in the one-job series render benchmark (0: skip it)");
ABSL_FLAG(bool, durable, true,
          "give the coordinator a fresh --state_dir (under $TMPDIR), so registrations, jobs and "
          "the series' batched writes go to its SQLite store as in production");
ABSL_FLAG(int32_t, plan_ranks, 16384, "world size for the planning benchmark");
ABSL_FLAG(int32_t, rendezvous_ranks, 1000,
          "world size for the rendezvous benchmark (0: skip it): its bootstrap's Sets in the "
          "core, in memory and journaled to a state store");
ABSL_FLAG(std::string, coordinator, "", "coordinator binary (default: from runfiles)");
ABSL_FLAG(std::string, out, "coordinator_load_results.txt", "results file");

namespace sc = shardline::coordinator;
using shardline::coordinator::HttpGet;

namespace {

double ProcessCpuSeconds(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close_paren = text.rfind(')');
  if (close_paren == std::string::npos) return 0;
  std::vector<std::string> f = absl::StrSplit(text.substr(close_paren + 2), ' ');
  // Fields after the command: state(0) ... utime(11) stime(12), in clock ticks.
  int64_t ut = 0, st = 0;
  if (f.size() < 13 || !absl::SimpleAtoi(f[11], &ut) || !absl::SimpleAtoi(f[12], &st)) return 0;
  return static_cast<double>(ut + st) / sysconf(_SC_CLK_TCK);
}

double SelfCpuSeconds() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_utime.tv_usec / 1e6 + u.ru_stime.tv_sec +
         u.ru_stime.tv_usec / 1e6;
}

// CPU time of the calling thread: on a shared machine, wall time mostly measures the others.
double ThreadCpuMs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

double Percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  const size_t k = std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5));
  std::nth_element(v.begin(), v.begin() + k, v.end());
  return v[k];
}

std::string DefaultCoordinatorPath(const char* argv0) {
  for (const std::string& p : {absl::StrCat(argv0, ".runfiles/shardline/coordinator/coordinator"),
                               std::string("coordinator/coordinator")}) {
    if (access(p.c_str(), X_OK) == 0) return p;
  }
  return sc::CoordinatorBinaryPath();
}

std::string PlanningTable(int ranks) {
  std::string out =
      absl::StrFormat("planning %d ranks on %d nodes x 8 slots (median of 5)\n", ranks, ranks / 8);
  absl::StrAppend(&out, absl::StrFormat("  %-14s %10s\n", "shard degree", "time ms"));
  std::vector<sc::NodeCapacity> nodes(ranks / 8);
  for (size_t i = 0; i < nodes.size(); ++i) {
    nodes[i].worker_id = absl::StrCat("w", i);
    nodes[i].node_name = absl::StrFormat("node%05d", i);
    nodes[i].address = "10.0.0.1";
    for (int s = 0; s < 8; ++s) nodes[i].free_slots.push_back(s);
  }
  for (int s : {1, 8, 64, ranks}) {
    std::vector<double> ms;
    for (int rep = 0; rep < 5; ++rep) {
      const absl::Time t0 = absl::Now();
      auto plan = sc::PlanPlacement(ranks, s, nodes);
      ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
      if (!plan.ok()) return absl::StrCat(out, "  error: ", plan.status().ToString(), "\n");
    }
    absl::StrAppend(&out, absl::StrFormat("  %-14d %10.2f\n", s, Percentile(ms, 0.5)));
  }
  return out;
}

// A START one simulated worker received: the rank it would run and its attempt credential.
struct StartedRank {
  int worker = 0;  // index into the simulated workers
  shardline::Assignment assignment;
};

// Holds one assignment stream open per worker with the async API (one thread for all), and
// keeps the STARTs they carry.
class OpenStreams {
 public:
  OpenStreams(const std::string& address, const std::vector<std::string>& ids,
              const std::vector<std::string>& credentials) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // its own connection
    auto channel = grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
    stub_ = shardline::Coordinator::NewStub(channel);
    calls_.resize(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      Call& c = calls_[i];
      c.worker = static_cast<int>(i);
      shardline::StreamAssignmentsRequest req;
      req.set_worker_id(ids[i]);
      c.ctx.AddMetadata("x-shardline-worker-credential", credentials[i]);
      c.reader = stub_->PrepareAsyncStreamAssignments(&c.ctx, req, &cq_);
      c.reader->StartCall(&c);
    }
    thread_ = std::thread([this] {
      void* tag;
      bool ok;
      while (cq_.Next(&tag, &ok)) {
        Call* c = static_cast<Call*>(tag);
        if (c->finishing) {
          c->done = true;
          continue;
        }
        if (ok) {
          if (!c->started) {
            c->started = true;
            started_++;
          } else if (c->msg.action() == shardline::Assignment::START) {
            absl::MutexLock lock(&mu_);
            starts_.push_back({c->worker, c->msg});
          }
          c->reader->Read(&c->msg, c);
        } else {
          c->finishing = true;
          c->reader->Finish(&c->status, c);
        }
      }
    });
  }
  ~OpenStreams() {
    for (Call& c : calls_) c.ctx.TryCancel();
    // Every call ends with one Finish completion; then the queue can shut down.
    for (int spins = 0; spins < 1000; ++spins) {
      bool all = true;
      for (Call& c : calls_) all &= c.done.load();
      if (all) break;
      absl::SleepFor(absl::Milliseconds(10));
    }
    cq_.Shutdown();
    thread_.join();
  }
  int64_t started() const { return started_.load(); }
  // The STARTs received so far, once at least `n` arrived or `timeout` passed.
  std::vector<StartedRank> WaitForStarts(size_t n, absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto enough = [&] { return starts_.size() >= n; };
    mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
    return starts_;
  }

 private:
  struct Call {
    int worker = 0;
    grpc::ClientContext ctx;
    std::unique_ptr<grpc::ClientAsyncReader<shardline::Assignment>> reader;
    shardline::Assignment msg;
    grpc::Status status;
    bool started = false;
    bool finishing = false;
    std::atomic<bool> done{false};
  };
  std::unique_ptr<shardline::Coordinator::Stub> stub_;
  grpc::CompletionQueue cq_;
  std::deque<Call> calls_;
  std::atomic<int64_t> started_{0};
  absl::Mutex mu_;
  std::vector<StartedRank> starts_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

// A job the simulated workers can hold: one rank, many steps (it never ends during the run).
shardline::JobSpec LoadJobSpec(const std::string& name) {
  shardline::JobSpec s;
  s.set_name(name);
  s.set_world_size(1);
  shardline::ModelSpec* m = s.mutable_model();
  m->set_architecture(shardline::ModelSpec::GPT);
  m->set_n_embd(32);
  m->set_n_layer(1);
  m->set_n_head(2);
  m->set_vocab_size(256);
  m->set_block_size(16);
  shardline::DataSpec* d = s.mutable_data();
  d->set_path("/data/on/the/workers.txt");
  d->set_format(shardline::DataSpec::TEXT);
  d->set_val_fraction(0.1f);
  d->set_seq_len(16);
  shardline::OptimizerSpec* o = s.mutable_optimizer();
  o->set_kind(shardline::OptimizerSpec::ADAMW);
  o->set_lr(1e-3);
  o->set_beta1(0.9);
  o->set_beta2(0.95);
  o->set_eps(1e-8);
  o->set_min_lr(1e-3);
  shardline::FsdpSpec* f = s.mutable_fsdp();
  f->set_sharding_strategy(shardline::FsdpSpec::FULL_SHARD);
  f->set_auto_wrap_policy(shardline::FsdpSpec::TRANSFORMER_BLOCK);
  f->set_backward_prefetch(shardline::FsdpSpec::BACKWARD_PRE);
  f->set_collective_timeout_s(60);
  shardline::TrainSpec* t = s.mutable_train();
  t->set_steps(10000000);
  t->set_global_batch_size(2);
  t->set_micro_batch_size(2);
  t->set_log_every(1);
  t->set_eval_batches(1);
  s.mutable_checkpoint()->set_dir("/ckpt");
  s.mutable_checkpoint()->set_keep_last(3);
  s.mutable_device()->set_kind(shardline::DeviceSpec::CPU);
  return s;
}

// Rank 0's report of `step`: a decaying loss, fixed throughput figures, no evaluation.
shardline::ProgressReport Report(const std::string& job_id, int32_t attempt, int64_t step) {
  shardline::ProgressReport p;
  p.set_job_id(job_id);
  p.set_attempt(attempt);
  p.set_rank(0);
  p.set_step(step);
  p.set_loss(2.0 + 8.0 * std::exp(-static_cast<double>(step) / 20000.0));
  p.set_lr(1e-3);
  p.set_grad_norm(1.0);
  p.set_tokens_per_s(12000);
  p.set_mfu(0.4);
  p.set_step_time_s(0.25);
  p.set_peak_memory_bytes(int64_t{8} << 30);
  p.set_val_loss(NAN);
  return p;
}

// Registers `nodes` workers of 8 CPU slots each with `core`; returns the first one's id ("" when
// none registered).
std::string RegisterNodes(sc::CoordinatorCore& core, int nodes) {
  std::string first;
  for (int n = 0; n < nodes; ++n) {
    shardline::RegisterWorkerRequest req;
    req.set_node_name(absl::StrFormat("node%05d", n));
    req.set_address("10.0.0.1");
    for (int k = 0; k < 8; ++k) {
      auto* slot = req.add_slots();
      slot->set_kind(shardline::Slot::CPU);
      slot->set_index(k);
    }
    auto r = core.RegisterWorker(req);
    if (r.ok() && first.empty()) first = r->worker_id();
  }
  return first;
}

// Submit-to-RUNNING inside the core (planning, reservations, rendezvous, one START per rank) for
// a job of `ranks` ranks on nodes of 8 slots.
std::string ScheduleTable(int ranks) {
  std::string out = absl::StrFormat(
      "scheduling a %d-rank job in the core (plan + reserve + %d STARTs queued)\n", ranks, ranks);
  absl::StrAppend(&out, absl::StrFormat("  %-14s %10s\n", "shard degree", "time ms"));
  for (int s : {8, 64}) {
    shardline::RealClock clock;
    sc::CoreOptions o;
    o.clock = &clock;
    auto core = sc::CoordinatorCore::Create(o);
    if (!core.ok()) return absl::StrCat(out, "  error: ", core.status().ToString(), "\n");
    (void)RegisterNodes(**core, ranks / 8);
    shardline::JobSpec spec;
    spec.set_name("big");
    spec.set_world_size(ranks);
    spec.mutable_fsdp()->set_sharding_strategy(shardline::FsdpSpec::HYBRID_SHARD);
    spec.mutable_fsdp()->set_hybrid_shard_degree(s);
    const absl::Time t0 = absl::Now();
    auto id = (*core)->SubmitJob(spec);
    const double ms = absl::ToDoubleMilliseconds(absl::Now() - t0);
    if (!id.ok() || (*core)->GetJob(*id)->state() != shardline::RUNNING) {
      return absl::StrCat(out, "  error: job did not start\n");
    }
    absl::StrAppend(&out, absl::StrFormat("  %-14d %10.1f\n", s, ms));
  }
  return out;
}

// A `ranks`-rank attempt's bootstrap writes (kKeysPerRank Sets per rank, from 8 threads) through
// the core, in memory and with a state store (each Set queued on the state writer, batched): the
// Sets' time, and the time until the writer has stored them all (the core's destruction drains
// its queue).
std::string RendezvousTable(int ranks) {
  constexpr int kKeysPerRank = 4;
  constexpr int kThreads = 8;
  std::string out = absl::StrFormat(
      "rendezvous: %d Sets (%d ranks x %d keys, 100-byte values, %d threads) in the core\n",
      ranks * kKeysPerRank, ranks, kKeysPerRank, kThreads);
  absl::StrAppend(&out, absl::StrFormat("  %-12s %10s %12s\n", "store", "Sets ms", "stored ms"));
  const char* tmp = std::getenv("TMPDIR");
  for (bool durable : {false, true}) {
    shardline::RealClock clock;
    sc::CoreOptions o;
    o.clock = &clock;
    if (durable) {
      o.state_dir = absl::StrCat(tmp ? tmp : "/tmp", "/coordinator_load_rendezvous_", getpid());
      std::filesystem::remove_all(o.state_dir);
    }
    auto core = sc::CoordinatorCore::Create(o);
    if (!core.ok()) return absl::StrCat(out, "  error: ", core.status().ToString(), "\n");
    const std::string first_worker = RegisterNodes(**core, (ranks + 7) / 8);
    shardline::JobSpec spec;
    spec.set_name("big");
    spec.set_world_size(ranks);
    spec.mutable_fsdp()->set_sharding_strategy(shardline::FsdpSpec::FULL_SHARD);
    auto id = (*core)->SubmitJob(spec);
    auto gen = (*core)->OpenAssignmentStream(first_worker);
    shardline::Assignment a;
    if (!id.ok() || !gen.ok() ||
        !(*core)->NextAssignment(first_worker, *gen, absl::ZeroDuration(), &a).value_or(false)) {
      return absl::StrCat(out, "  error: job did not start\n");
    }
    std::atomic<int64_t> errors{0};
    const absl::Time t0 = absl::Now();
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        shardline::RendezvousSetRequest req;
        req.set_namespace_(a.rendezvous_namespace());
        req.set_secret(a.rendezvous_secret());
        req.set_value(std::string(100, 'v'));
        for (int i = t; i < ranks * kKeysPerRank; i += kThreads) {
          req.set_key(absl::StrCat("group", i % kKeysPerRank, "/rank_", i / kKeysPerRank));
          if (!(*core)->RendezvousSet(req).ok()) errors++;
        }
      });
    }
    for (std::thread& t : threads) t.join();
    const double set_ms = absl::ToDoubleMilliseconds(absl::Now() - t0);
    core->reset();  // the writer stores its queue as it stops
    const double stored_ms = absl::ToDoubleMilliseconds(absl::Now() - t0);
    if (durable) std::filesystem::remove_all(o.state_dir);
    absl::StrAppend(
        &out, absl::StrFormat("  %-12s %10.1f %12s%s\n", durable ? "state store" : "memory", set_ms,
                              durable ? absl::StrFormat("%.1f", stored_ms) : "-",
                              errors > 0 ? absl::StrCat("  (", errors.load(), " errors)") : ""));
  }
  return out;
}

// One configuration's figures, over all of its phases.
struct ConfigResult {
  int64_t beats = 0;
  int64_t errors = 0;
  double p50_ms = 0, p99_ms = 0, max_ms = 0;
  double rate = 0;
  double coordinator_cpu = 0;  // cores
  double tool_cpu = 0;         // cores
  int64_t reports = 0;
  int64_t report_errors = 0;
  double report_p99_ms = 0;
  int64_t scrapes = 0;
  double scrape_ms = 0;  // median
  double scrape_kib = 0;
};

struct LoadResult {
  int workers = 0;
  int64_t streams = 0;
  int jobs = 0;  // running one-rank jobs (their STARTs arrived)
  int phases = 1;
  double register_s = 0;     // registering the workers
  double jobs_start_s = 0;   // submitting the jobs until every START arrived
  int64_t setup_errors = 0;  // failed registrations and submissions (client side)
  ConfigResult without;      // even phases
  ConfigResult with;         // odd phases: reports and scrapes
  std::string error;
};

LoadResult RunLoad(const std::string& binary, int n_workers) {
  LoadResult r;
  r.workers = n_workers;
  const int want_jobs = std::max(0, absl::GetFlag(FLAGS_jobs));
  const int scrape_s = absl::GetFlag(FLAGS_scrape_s);
  sc::CoordinatorProcess::Options po;
  po.binary = binary;
  po.args = {"--listen=127.0.0.1:0", "--heartbeat_interval_ms=1000",
             "--heartbeat_timeout_ms=120000", "--tick_ms=200",  // liveness is not under test
             // One connection carries every simulated worker's assignment stream; real workers
             // each have their own.
             absl::StrCat("--grpc_max_concurrent_streams=", n_workers + 1000)};
  if (want_jobs > 0 && scrape_s > 0) po.args.push_back("--metrics_listen=127.0.0.1:0");
  const char* tmp = std::getenv("TMPDIR");
  const std::string prefix = absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp",
                                          "/coordinator_load_", getpid(), "_", n_workers);
  std::string state_dir;
  if (absl::GetFlag(FLAGS_durable)) {
    state_dir = prefix + "_state";
    std::filesystem::remove_all(state_dir);
    po.args.push_back(absl::StrCat("--state_dir=", state_dir));
  }
  po.stderr_path = prefix + ".log";  // a line per registration and job: kept off the table
  std::cerr << "coordinator log: " << po.stderr_path << "\n";
  auto proc = sc::CoordinatorProcess::Start(po);
  if (!proc.ok()) {
    r.error = proc.status().ToString();
    return r;
  }
  const int n_channels = std::max(1, absl::GetFlag(FLAGS_channels));
  std::vector<std::unique_ptr<shardline::client::CoordinatorClient>> clients;
  for (int c = 0; c < n_channels; ++c) {
    shardline::client::CoordinatorClient::Options co;
    co.address = (*proc)->address();
    co.timeout = absl::Seconds(10);
    // Separate channels: gRPC shares a subchannel between equal channel args, so make each
    // channel distinct only by being a separate object (the client creates its own channel).
    clients.push_back(std::move(*shardline::client::CoordinatorClient::Create(co)));
  }
  (void)clients[0]->WaitForReady(absl::Seconds(10));
  const int n_threads = std::max(1, absl::GetFlag(FLAGS_threads));
  std::vector<std::string> ids(n_workers);
  std::vector<std::string> credentials(n_workers);  // each worker's own (RegisterWorker's)
  std::atomic<int64_t> errors{0};
  const absl::Time reg_start = absl::Now();
  {
    std::vector<std::thread> reg;
    for (int t = 0; t < n_threads; ++t) {
      reg.emplace_back([&, t] {
        for (int i = t; i < n_workers; i += n_threads) {
          shardline::RegisterWorkerRequest req;
          req.set_node_name(absl::StrFormat("sim-%06d", i));
          req.set_address("127.0.0.1");
          for (int s = 0; s < 8; ++s) {
            auto* slot = req.add_slots();
            slot->set_kind(shardline::Slot::CPU);
            slot->set_index(s);
          }
          auto resp = clients[t % n_channels]->RegisterWorker(req);
          if (resp.ok()) {
            ids[i] = resp->worker_id();
            credentials[i] = resp->worker_credential();
          } else {
            errors++;
          }
        }
      });
    }
    for (auto& th : reg) th.join();
  }
  r.register_s = absl::ToDoubleSeconds(absl::Now() - reg_start);
  std::cerr << n_workers << " workers registered in " << r.register_s << " s\n";
  std::unique_ptr<OpenStreams> streams;
  if (absl::GetFlag(FLAGS_streams) || want_jobs > 0) {
    streams = std::make_unique<OpenStreams>((*proc)->address(), ids, credentials);
    absl::SleepFor(absl::Seconds(2));  // let the streams open
  }
  // The jobs: submitted from the channels' threads, placed by the coordinator; each START tells
  // its worker the rank to list as RUNNING and rank 0 the attempt credential to report with.
  std::vector<shardline::HeartbeatRequest> beats(n_workers);
  for (int i = 0; i < n_workers; ++i) beats[i].set_worker_id(ids[i]);
  std::vector<StartedRank> started;
  if (want_jobs > 0) {
    const absl::Time submit_start = absl::Now();
    std::vector<std::thread> submitters;
    for (int t = 0; t < n_threads; ++t) {
      submitters.emplace_back([&, t] {
        for (int j = t; j < want_jobs; j += n_threads) {
          auto id = clients[t % n_channels]->SubmitJob(LoadJobSpec(absl::StrCat("load-", j)));
          if (!id.ok() && errors++ == 0) std::cerr << "first submit error: " << id.status() << "\n";
        }
      });
    }
    for (auto& th : submitters) th.join();
    started = streams->WaitForStarts(want_jobs, absl::Seconds(60));
    r.jobs_start_s = absl::ToDoubleSeconds(absl::Now() - submit_start);
    std::cerr << started.size() << " of " << want_jobs << " jobs started in " << r.jobs_start_s
              << " s\n";
    for (const StartedRank& s : started) {
      shardline::RankStatus* rs = beats[s.worker].add_ranks();
      rs->set_job_id(s.assignment.job_id());
      rs->set_attempt(s.assignment.attempt());
      rs->set_rank(s.assignment.rank());
      rs->set_state(shardline::RankStatus::RUNNING);
    }
  }
  r.jobs = static_cast<int>(started.size());
  r.phases = want_jobs > 0 ? std::max(2, absl::GetFlag(FLAGS_phases)) : 1;
  const int n_phases = r.phases;
  const absl::Duration duration = absl::Seconds(absl::GetFlag(FLAGS_duration_s));
  const absl::Duration phase_len = duration / n_phases;
  const absl::Time start = absl::Now() + absl::Milliseconds(200);
  auto phase_of = [&](absl::Time t) {
    return std::clamp(static_cast<int>((t - start) / phase_len), 0, n_phases - 1);
  };
  // lat[thread][phase]
  std::vector<std::vector<std::vector<double>>> lat(n_threads,
                                                    std::vector<std::vector<double>>(n_phases));
  std::atomic<int64_t> beat_errors[2] = {0, 0};  // by phase parity
  std::vector<std::thread> beaters;
  for (int t = 0; t < n_threads; ++t) {
    beaters.emplace_back([&, t] {
      std::vector<int> mine;
      for (int i = t; i < n_workers; i += n_threads) mine.push_back(i);
      for (int64_t round = 0;; ++round) {
        for (int i : mine) {
          // Worker i beats at offset i/N of each second.
          const absl::Time due = start + absl::Seconds(round) +
                                 absl::Seconds(1) * (static_cast<double>(i) / n_workers);
          if (due - start >= duration) return;
          const absl::Time now = absl::Now();
          if (due > now) absl::SleepFor(due - now);
          const absl::Time t0 = absl::Now();
          auto resp = clients[t % n_channels]->Heartbeat(beats[i], credentials[i]);
          const int phase = phase_of(due);
          lat[t][phase].push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
          if (!resp.ok()) {
            if (beat_errors[phase % 2]++ == 0) {
              std::cerr << "first heartbeat error: " << resp.status() << "\n";
            }
          } else if (resp->reregister()) {
            if (beat_errors[phase % 2]++ == 0) {
              std::cerr << "first heartbeat error: told to re-register\n";
            }
          }
        }
      }
    });
  }
  // Rank 0 of job j reports at offset j/J of each second of the odd phases.
  const int n_reporters = std::max(1, absl::GetFlag(FLAGS_reporters));
  std::vector<std::vector<double>> report_lat(n_reporters);
  std::atomic<int64_t> report_errors{0};
  std::vector<std::thread> reporters;
  for (int t = 0; t < n_reporters && !started.empty(); ++t) {
    reporters.emplace_back([&, t] {
      const int n_jobs = static_cast<int>(started.size());
      std::vector<int64_t> step(n_jobs, 0);
      for (int64_t round = 0;; ++round) {
        for (int j = t; j < n_jobs; j += n_reporters) {
          const absl::Time due =
              start + absl::Seconds(round) + absl::Seconds(1) * (static_cast<double>(j) / n_jobs);
          if (due - start >= duration) return;
          if (phase_of(due) % 2 == 0) continue;
          const absl::Time now = absl::Now();
          if (due > now) absl::SleepFor(due - now);
          const shardline::Assignment& a = started[j].assignment;
          const absl::Time t0 = absl::Now();
          absl::Status s = clients[(t + j) % n_channels]->ReportProgress(
              Report(a.job_id(), a.attempt(), ++step[j]), a.rendezvous_secret());
          report_lat[t].push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
          if (!s.ok() && report_errors++ == 0) std::cerr << "first report error: " << s << "\n";
        }
      }
    });
  }
  // Prometheus scrapes in the odd phases.
  std::vector<double> scrape_ms, scrape_bytes;
  std::thread scraper;
  if (!started.empty() && scrape_s > 0 && !(*proc)->metrics_address().empty()) {
    scraper = std::thread([&] {
      for (int64_t k = 0;; ++k) {
        const absl::Time due = start + absl::Seconds(k * scrape_s) + absl::Milliseconds(500);
        if (due - start >= duration) return;
        if (phase_of(due) % 2 == 0) continue;
        const absl::Time now = absl::Now();
        if (due > now) absl::SleepFor(due - now);
        const absl::Time t0 = absl::Now();
        const std::string text = HttpGet((*proc)->metrics_address(), "/metrics");
        scrape_ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
        scrape_bytes.push_back(static_cast<double>(text.size()));
        if (text.find(" 200 OK") == std::string::npos && report_errors++ == 0) {
          std::cerr << "first scrape error: " << text.substr(0, 200) << "\n";
        }
      }
    });
  }
  // CPU at each phase boundary.
  std::vector<double> coord_cpu(n_phases + 1), tool_cpu(n_phases + 1);
  std::vector<absl::Time> at(n_phases + 1);
  for (int p = 0; p <= n_phases; ++p) {
    const absl::Time boundary = start + phase_len * p;
    if (boundary > absl::Now()) absl::SleepFor(boundary - absl::Now());
    at[p] = absl::Now();
    coord_cpu[p] = ProcessCpuSeconds((*proc)->pid());
    tool_cpu[p] = SelfCpuSeconds();
  }
  for (auto& th : beaters) th.join();
  for (auto& th : reporters) th.join();
  if (scraper.joinable()) scraper.join();
  if (streams) r.streams = streams->started();
  for (int parity = 0; parity < 2; ++parity) {
    ConfigResult& c = parity == 0 ? r.without : r.with;
    std::vector<double> all;
    double wall = 0, coord = 0, tool = 0;
    for (int p = parity; p < n_phases; p += 2) {
      for (auto& v : lat) all.insert(all.end(), v[p].begin(), v[p].end());
      wall += absl::ToDoubleSeconds(at[p + 1] - at[p]);
      coord += coord_cpu[p + 1] - coord_cpu[p];
      tool += tool_cpu[p + 1] - tool_cpu[p];
    }
    if (wall <= 0) continue;
    c.beats = static_cast<int64_t>(all.size());
    c.rate = all.size() / wall;
    c.p50_ms = Percentile(all, 0.50);
    c.p99_ms = Percentile(all, 0.99);
    c.max_ms = all.empty() ? 0 : *std::max_element(all.begin(), all.end());
    c.coordinator_cpu = coord / wall;
    c.tool_cpu = tool / wall;
  }
  r.without.errors = beat_errors[0].load();
  r.setup_errors = errors.load();
  r.with.errors = beat_errors[1].load();
  streams.reset();
  proc->reset();
  if (!state_dir.empty()) std::filesystem::remove_all(state_dir);
  std::vector<double> reports;
  for (auto& v : report_lat) reports.insert(reports.end(), v.begin(), v.end());
  r.with.reports = static_cast<int64_t>(reports.size());
  r.with.report_errors = report_errors.load();
  r.with.report_p99_ms = Percentile(reports, 0.99);
  r.with.scrapes = static_cast<int64_t>(scrape_ms.size());
  r.with.scrape_ms = Percentile(scrape_ms, 0.5);
  r.with.scrape_kib = Percentile(scrape_bytes, 0.5) / 1024;
  return r;
}

// One job's training series fed `steps` logged steps through the core (as rank 0's reports
// arrive), then read back as GetJobMetrics answers it.
std::string HistoryTable(int64_t steps) {
  std::string out = absl::StrFormat(
      "one job's training series fed %d steps through CoordinatorCore::ReportProgress\n", steps);
  shardline::RealClock clock;
  sc::CoreOptions o;
  o.clock = &clock;
  auto core = sc::CoordinatorCore::Create(o);
  if (!core.ok()) return absl::StrCat(out, "  error: ", core.status().ToString(), "\n");
  shardline::RegisterWorkerRequest reg;
  reg.set_node_name("node0");
  reg.set_address("10.0.0.1");
  auto* slot = reg.add_slots();
  slot->set_kind(shardline::Slot::CPU);
  slot->set_index(0);
  (void)(*core)->RegisterWorker(reg);
  auto id = (*core)->SubmitJob(LoadJobSpec("history"));
  if (!id.ok() || (*core)->GetJob(*id)->state() != shardline::RUNNING) {
    return absl::StrCat(out, "  error: job did not start\n");
  }
  const absl::Time t0 = absl::Now();
  for (int64_t step = 1; step <= steps; ++step) {
    absl::Status s = (*core)->ReportProgress(Report(*id, 1, step));
    if (!s.ok()) return absl::StrCat(out, "  error at step ", step, ": ", s.ToString(), "\n");
  }
  const double feed_s = absl::ToDoubleSeconds(absl::Now() - t0);
  shardline::GetJobMetricsRequest req;
  req.set_job_id(*id);
  std::vector<double> build_ms, proto_ms, json_ms;
  shardline::GetJobMetricsResponse resp;
  std::string wire, json;
  for (int rep = 0; rep < 5; ++rep) {
    absl::Time t = absl::Now();
    auto r = (*core)->GetJobMetrics(req);
    build_ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - t));
    if (!r.ok()) return absl::StrCat(out, "  error: ", r.status().ToString(), "\n");
    resp = *std::move(r);
    t = absl::Now();
    wire = resp.SerializeAsString();
    proto_ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - t));
    t = absl::Now();
    json.clear();
    (void)google::protobuf::util::MessageToJsonString(resp, &json);
    json_ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - t));
  }
  absl::StrAppend(&out,
                  absl::StrFormat("  fed in %.2f s (%.2f us a report); series capacity %d\n",
                                  feed_s, feed_s * 1e6 / std::max<int64_t>(1, steps),
                                  sc::TrainingSeries::kDefaultCapacity),
                  absl::StrFormat("  %-34s %d points of %d steps (%d steps covered)\n",
                                  "stored per series:", resp.points_size(), resp.stride(),
                                  resp.reported_steps()),
                  absl::StrFormat("  %-34s %8.2f ms (median of 5)\n",
                                  "GetJobMetrics response built:", Percentile(build_ms, 0.5)),
                  absl::StrFormat("  %-34s %8.2f ms, %.1f KiB\n", "  serialized (protobuf wire):",
                                  Percentile(proto_ms, 0.5), wire.size() / 1024.0),
                  absl::StrFormat("  %-34s %8.2f ms, %.1f KiB\n",
                                  "  as JSON (MessageToJsonString):", Percentile(json_ms, 0.5),
                                  json.size() / 1024.0));
  return out;
}

// One /metrics render (prometheus-cpp: gauges synced from the core, Collect, TextSerializer) of a
// core holding `workers` live workers and `jobs` running one-rank jobs that each reported once.
std::string ScrapeTable(int workers, int jobs) {
  std::string out = absl::StrFormat(
      "/metrics rendered in process (CoordinatorMetrics::Render) for %d workers and %d running "
      "jobs\n",
      workers, jobs);
  shardline::RealClock clock;
  sc::CoreOptions o;
  o.clock = &clock;
  o.heartbeat_timeout = absl::Hours(1);
  auto core = sc::CoordinatorCore::Create(o);
  if (!core.ok()) return absl::StrCat(out, "  error: ", core.status().ToString(), "\n");
  (void)RegisterNodes(**core, workers);
  int running = 0;
  for (int j = 0; j < jobs; ++j) {
    auto id = (*core)->SubmitJob(LoadJobSpec(absl::StrCat("load-", j)));
    if (id.ok() && (*core)->ReportProgress(Report(*id, 1, 1)).ok()) ++running;
  }
  sc::CoordinatorMetrics metrics;
  std::vector<double> ms, cpu_ms;
  size_t bytes = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const absl::Time t0 = absl::Now();
    const double c0 = ThreadCpuMs();
    bytes = metrics.Render(**core).size();
    cpu_ms.push_back(ThreadCpuMs() - c0);
    ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
  }
  const double first_cpu = cpu_ms[0];
  absl::StrAppend(
      &out, absl::StrFormat("  %d jobs reporting; %.0f KiB; render %.1f ms CPU, %.1f ms wall "
                            "(medians of 5; the first, which adds every label set, %.1f ms CPU)\n",
                            running, bytes / 1024.0, Percentile(cpu_ms, 0.5), Percentile(ms, 0.5),
                            first_cpu));
  return out;
}

}  // namespace

// "host, CPU model" of this machine.
std::string Machine() {
  char host[256] = "";
  gethostname(host, sizeof(host) - 1);
  std::ifstream in("/proc/cpuinfo");
  std::string line, model = "unknown CPU";
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, "model name")) {
      model = std::string(absl::StripAsciiWhitespace(line.substr(line.find(':') + 1)));
      break;
    }
  }
  return absl::StrCat(host, ", ", model);
}

std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return absl::StrCat(a, " ", b, " ", c);
}

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  std::string binary = absl::GetFlag(FLAGS_coordinator);
  if (binary.empty()) binary = DefaultCoordinatorPath(argv[0]);
  std::string report = absl::StrCat(
      "coordinator load test on ", std::thread::hardware_concurrency(), " cores (", Machine(),
      "); ", absl::FormatTime(absl::Now()), "; load average at start ", LoadAverage(),
      " (the coordinator, this tool and anything else running share the cores)\n\n");
  absl::StrAppend(&report, PlanningTable(absl::GetFlag(FLAGS_plan_ranks)), "\n");
  absl::StrAppend(&report, ScheduleTable(absl::GetFlag(FLAGS_plan_ranks)), "\n");
  if (absl::GetFlag(FLAGS_rendezvous_ranks) > 0) {
    absl::StrAppend(&report, RendezvousTable(absl::GetFlag(FLAGS_rendezvous_ranks)), "\n");
  }
  std::cout << report << std::flush;
  if (absl::GetFlag(FLAGS_history_steps) > 0) {
    const std::string history = HistoryTable(absl::GetFlag(FLAGS_history_steps));
    std::cout << history << "\n" << std::flush;
    absl::StrAppend(&report, history, "\n");
  }
  const int jobs = absl::GetFlag(FLAGS_jobs);
  if (jobs > 0) {
    int most = 0;
    for (absl::string_view w : absl::StrSplit(absl::GetFlag(FLAGS_workers), ',')) {
      int n = 0;
      if (absl::SimpleAtoi(w, &n)) most = std::max(most, n);
    }
    const std::string scrape = ScrapeTable(most, jobs);
    std::cout << scrape << "\n" << std::flush;
    absl::StrAppend(&report, scrape, "\n");
  }
  std::string table = absl::StrFormat(
      "heartbeats at 1/s per worker, %ds, %d client threads, %d channels\n",
      absl::GetFlag(FLAGS_duration_s), absl::GetFlag(FLAGS_threads), absl::GetFlag(FLAGS_channels));
  if (jobs > 0) {
    absl::StrAppend(
        &table,
        absl::StrFormat(
            "  %d one-rank jobs running throughout; the time alternates between phases without\n"
            "  and with reports: each job's rank 0 sends ReportProgress once a second (%d client\n"
            "  threads) and /metrics is scraped every %ds (0: never)\n",
            jobs, absl::GetFlag(FLAGS_reporters), absl::GetFlag(FLAGS_scrape_s)));
  }
  absl::StrAppend(
      &table, absl::StrFormat("  %8s %8s %5s %7s %8s %9s %8s %8s %8s %8s %7s %12s %10s"
                              " %10s %9s %10s\n",
                              "workers", "streams", "jobs", "phases", "reports", "beats", "rate/s",
                              "p50 ms", "p99 ms", "max ms", "errors", "coord cores", "tool cores",
                              "rep p99 ms", "scrape ms", "scrape KiB"));
  std::cout << table << std::flush;
  for (absl::string_view w : absl::StrSplit(absl::GetFlag(FLAGS_workers), ',')) {
    int n = 0;
    if (!absl::SimpleAtoi(w, &n) || n <= 0) continue;
    LoadResult r = RunLoad(binary, n);
    std::string lines;
    if (!r.error.empty()) {
      lines = absl::StrFormat("  %8d error: %s\n", r.workers, r.error);
    } else {
      auto row = [&](const ConfigResult& c, bool with) {
        return absl::StrFormat(
            "  %8d %8d %5d %7s %8s %9d %8.0f %8.2f %8.2f %8.2f %7d %12.2f %10.2f %10s %9s %10s\n",
            r.workers, r.streams, r.jobs,
            r.phases == 1 ? std::string("1")
                          : absl::StrCat(r.phases / 2 + (with ? 0 : r.phases % 2), "x",
                                         absl::GetFlag(FLAGS_duration_s) / r.phases, "s"),
            with ? absl::StrCat(c.reports) : "off", c.beats, c.rate, c.p50_ms, c.p99_ms, c.max_ms,
            c.errors + c.report_errors, c.coordinator_cpu, c.tool_cpu,
            with ? absl::StrFormat("%.2f", c.report_p99_ms) : "-",
            with && c.scrapes > 0 ? absl::StrFormat("%.1f", c.scrape_ms) : "-",
            with && c.scrapes > 0 ? absl::StrFormat("%.0f", c.scrape_kib) : "-");
      };
      lines = row(r.without, false);
      if (r.phases > 1) {
        absl::StrAppend(
            &lines, row(r.with, true),
            absl::StrFormat("  %8s with/without reports: p50 x%.2f, p99 x%.2f%s\n", "",
                            r.without.p50_ms > 0 ? r.with.p50_ms / r.without.p50_ms : 0,
                            r.without.p99_ms > 0 ? r.with.p99_ms / r.without.p99_ms : 0,
                            r.with.p99_ms <= 1.1 * r.without.p99_ms ? " (p99 within 10%)"
                                                                    : " (p99 NOT within 10%)"));
      }
      absl::StrAppend(
          &lines, absl::StrFormat("  %8s setup: workers registered in %.1f s", "", r.register_s));
      if (r.jobs > 0) {
        absl::StrAppend(&lines, absl::StrFormat("; %d jobs submitted and started in %.1f s", r.jobs,
                                                r.jobs_start_s));
      }
      absl::StrAppend(&lines,
                      absl::StrFormat("; %d client-side setup errors%s\n", r.setup_errors,
                                      r.setup_errors > 0 ? " (see stderr for the first)" : ""));
    }
    std::cout << lines << std::flush;
    absl::StrAppend(&table, lines);
  }
  absl::StrAppend(&report, table, "load average at end ", LoadAverage(), "\n");
  std::ofstream(absl::GetFlag(FLAGS_out)) << report;
  std::cout << "results written to " << absl::GetFlag(FLAGS_out) << std::endl;
  return 0;
}
