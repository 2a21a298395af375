// coordinator_load: how the coordinator holds up under many workers.
//
//   1. Planning time: PlanPlacement for --plan_ranks ranks on nodes of 8 slots, for several
//      shard degrees (median of 5 runs).
//   2. For each count in --workers: starts the real coordinator binary, registers that many
//      simulated workers, then has each heartbeat once a second (spread evenly over the second)
//      for --duration_s, from --threads client threads over --channels channels. Reports
//      heartbeat latency p50/p99/max, the achieved rate and the coordinator's CPU use (from
//      /proc/<pid>/stat), and the load tool's own CPU (both share this machine's cores).
//
//   bazel run //coordinator/bench:coordinator_load -- --workers=1000,10000 --out=/tmp/load.txt
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

#include <grpcpp/grpcpp.h>
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"

#include "coordinator/client.h"
#include "coordinator/clock.h"
#include "coordinator/coordinator_core.h"
#include "coordinator/planner.h"
#include "coordinator/testing/coordinator_process.h"
#include "proto/coordinator.grpc.pb.h"

ABSL_FLAG(std::string, workers, "1000,10000", "simulated worker counts, comma separated");
ABSL_FLAG(int32_t, duration_s, 20, "heartbeat phase length per worker count");
ABSL_FLAG(int32_t, threads, 32, "client threads issuing heartbeats");
ABSL_FLAG(int32_t, channels, 8, "gRPC channels the threads share");
ABSL_FLAG(bool, streams, true,
          "each simulated worker also holds its assignment stream open (async client)");
ABSL_FLAG(int32_t, plan_ranks, 16384, "world size for the planning benchmark");
ABSL_FLAG(std::string, coordinator, "", "coordinator binary (default: from runfiles)");
ABSL_FLAG(std::string, out, "coordinator_load_results.txt", "results file");

namespace sc = shardline::coordinator;

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

// Holds one assignment stream open per worker with the async API (one thread for all).
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
          started_++;
          c->reader->Read(&c->msg, c);  // assignments are not expected here; keep reading
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

 private:
  struct Call {
    grpc::ClientContext ctx;
    std::unique_ptr<grpc::ClientAsyncReader<shardline::Assignment>> reader;
    shardline::Assignment msg;
    grpc::Status status;
    bool finishing = false;
    std::atomic<bool> done{false};
  };
  std::unique_ptr<shardline::Coordinator::Stub> stub_;
  grpc::CompletionQueue cq_;
  std::deque<Call> calls_;
  std::atomic<int64_t> started_{0};
  std::thread thread_;
};

// Submit-to-RUNNING inside the core (planning, reservations, rendezvous, one START per rank) for
// a job of `ranks` ranks on nodes of 8 slots.
std::string ScheduleTable(int ranks) {
  std::string out = absl::StrFormat(
      "scheduling a %d-rank job in the core (plan + reserve + %d STARTs queued)\n", ranks, ranks);
  absl::StrAppend(&out, absl::StrFormat("  %-14s %10s\n", "shard degree", "time ms"));
  for (int s : {8, 64}) {
    sc::RealClock clock;
    sc::CoreOptions o;
    o.clock = &clock;
    auto core = sc::CoordinatorCore::Create(o);
    if (!core.ok()) return absl::StrCat(out, "  error: ", core.status().ToString(), "\n");
    for (int n = 0; n < ranks / 8; ++n) {
      shardline::RegisterWorkerRequest req;
      req.set_node_name(absl::StrFormat("node%05d", n));
      req.set_address("10.0.0.1");
      for (int k = 0; k < 8; ++k) {
        auto* slot = req.add_slots();
        slot->set_kind(shardline::Slot::CPU);
        slot->set_index(k);
      }
      (void)(*core)->RegisterWorker(req);
    }
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

struct LoadResult {
  int workers = 0;
  int64_t streams = 0;
  int64_t beats = 0;
  int64_t errors = 0;
  double p50_ms = 0, p99_ms = 0, max_ms = 0;
  double rate = 0;
  double coordinator_cpu = 0;  // cores
  double tool_cpu = 0;         // cores
  std::string error;
};

LoadResult RunLoad(const std::string& binary, int n_workers) {
  LoadResult r;
  r.workers = n_workers;
  sc::CoordinatorProcess::Options po;
  po.binary = binary;
  po.args = {"--listen=127.0.0.1:0", "--heartbeat_interval_ms=1000",
             "--heartbeat_timeout_ms=120000", "--tick_ms=200"};  // liveness is not under test
  auto proc = sc::CoordinatorProcess::Start(po);
  if (!proc.ok()) {
    r.error = proc.status().ToString();
    return r;
  }
  const int n_channels = std::max(1, absl::GetFlag(FLAGS_channels));
  std::vector<std::unique_ptr<sc::CoordinatorClient>> clients;
  for (int c = 0; c < n_channels; ++c) {
    sc::CoordinatorClient::Options co;
    co.address = (*proc)->address();
    co.timeout = absl::Seconds(10);
    // Separate channels: gRPC shares a subchannel between equal channel args, so make each
    // channel distinct only by being a separate object (the client creates its own channel).
    clients.push_back(std::move(*sc::CoordinatorClient::Create(co)));
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
  std::cerr << n_workers << " workers registered in "
            << absl::FormatDuration(absl::Now() - reg_start) << "\n";
  std::unique_ptr<OpenStreams> streams;
  if (absl::GetFlag(FLAGS_streams)) {
    streams = std::make_unique<OpenStreams>((*proc)->address(), ids, credentials);
    absl::SleepFor(absl::Seconds(2));  // let the streams open
  }
  const absl::Duration duration = absl::Seconds(absl::GetFlag(FLAGS_duration_s));
  const absl::Time start = absl::Now() + absl::Milliseconds(200);
  const double cpu0 = ProcessCpuSeconds((*proc)->pid());
  const double self0 = SelfCpuSeconds();
  std::vector<std::vector<double>> lat(n_threads);
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
          shardline::HeartbeatRequest hb;
          hb.set_worker_id(ids[i]);
          const absl::Time t0 = absl::Now();
          auto resp = clients[t % n_channels]->Heartbeat(hb, credentials[i]);
          lat[t].push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
          if (!resp.ok()) {
            if (errors++ == 0) std::cerr << "first heartbeat error: " << resp.status() << "\n";
          } else if (resp->reregister()) {
            if (errors++ == 0) std::cerr << "first heartbeat error: told to re-register\n";
          }
        }
      }
    });
  }
  for (auto& th : beaters) th.join();
  const double wall = absl::ToDoubleSeconds(absl::Now() - start);
  if (streams) r.streams = streams->started();
  r.coordinator_cpu = (ProcessCpuSeconds((*proc)->pid()) - cpu0) / wall;
  r.tool_cpu = (SelfCpuSeconds() - self0) / wall;
  std::vector<double> all;
  for (auto& v : lat) all.insert(all.end(), v.begin(), v.end());
  r.beats = static_cast<int64_t>(all.size());
  r.errors = errors.load();
  r.rate = all.size() / wall;
  r.p50_ms = Percentile(all, 0.50);
  r.p99_ms = Percentile(all, 0.99);
  r.max_ms = all.empty() ? 0 : *std::max_element(all.begin(), all.end());
  return r;
}

}  // namespace

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
  std::string report =
      absl::StrCat("coordinator load test on ", std::thread::hardware_concurrency(), " cores; ",
                   absl::FormatTime(absl::Now()), "; load average at start ", LoadAverage(),
                   " (the coordinator, this tool and anything else running share the cores)\n\n");
  absl::StrAppend(&report, PlanningTable(absl::GetFlag(FLAGS_plan_ranks)), "\n");
  absl::StrAppend(&report, ScheduleTable(absl::GetFlag(FLAGS_plan_ranks)), "\n");
  std::cout << report << std::flush;
  std::string table = absl::StrFormat(
      "heartbeats at 1/s per worker, %ds, %d client threads, %d channels\n"
      "  %8s %8s %9s %8s %8s %8s %8s %7s %12s %10s\n",
      absl::GetFlag(FLAGS_duration_s), absl::GetFlag(FLAGS_threads), absl::GetFlag(FLAGS_channels),
      "workers", "streams", "beats", "rate/s", "p50 ms", "p99 ms", "max ms", "errors",
      "coord cores", "tool cores");
  std::cout << table << std::flush;
  for (absl::string_view w : absl::StrSplit(absl::GetFlag(FLAGS_workers), ',')) {
    int n = 0;
    if (!absl::SimpleAtoi(w, &n) || n <= 0) continue;
    LoadResult r = RunLoad(binary, n);
    std::string line =
        r.error.empty()
            ? absl::StrFormat("  %8d %8d %9d %8.0f %8.2f %8.2f %8.2f %7d %12.2f %10.2f\n",
                              r.workers, r.streams, r.beats, r.rate, r.p50_ms, r.p99_ms, r.max_ms,
                              r.errors, r.coordinator_cpu, r.tool_cpu)
            : absl::StrFormat("  %8d error: %s\n", r.workers, r.error);
    std::cout << line << std::flush;
    absl::StrAppend(&table, line);
  }
  absl::StrAppend(&report, table, "load average at end ", LoadAverage(), "\n");
  std::ofstream(absl::GetFlag(FLAGS_out)) << report;
  std::cout << "results written to " << absl::GetFlag(FLAGS_out) << std::endl;
  return 0;
}
