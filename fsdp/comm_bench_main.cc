// comm_bench: times the Gloo collectives on loopback, one process per rank, and prints a table
// (also written to --out as TSV). A program, not a test: numbers depend on the machine.
//
//   bazel run //fsdp:comm_bench -- --world_sizes=2,4 --sizes_mib=1,16 --iters=5 --impls=ours,gloo
//
// For each world size W the program starts itself W times through RunRanks (with --child);
// each child times all_gather (output of the given size), reduce_scatter (input of the given
// size) and all_reduce (of the given size), fp32, for each implementation of --impls:
//   ours  the world communicator of fsdp/comm_groups.h through its public API (GlooCommunicator:
//         a communication thread, kSum), reduce-scatter in the form FSDP uses,
//         ReduceScatterConsuming (reduces in the input: no working copy in power-of-two groups);
//   gloo  Gloo's own algorithms called directly on a second Gloo context of this process, the
//         way Gloo is meant to be used at its fastest: gloo::allgather, one
//         gloo::ReduceScatterHalvingDoubling instance built once and run repeatedly in place,
//         gloo::allreduce (ring). No copies, no thread hand-off: the ceiling for "ours".
// Each measurement: one warm-up call, a barrier, `iters` calls, a barrier; rank 0's time.
// "bus GB/s" follows the NCCL-tests convention: the bytes each rank must move, (W-1)/W of the
// buffer for all_gather and reduce_scatter and 2 (W-1)/W for all_reduce, per second; a
// reduce-scatter emulated as all-reduce + slice would show half the bus rate of a real one.
#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "fsdp/comm_groups.h"
#include "fsdp/tcp_kv_store.h"
#include "fsdp/testing/process_launcher.h"
#include "gloo/allgather.h"
#include "gloo/allreduce.h"
#include "gloo/barrier.h"
#include "gloo/math.h"
#include "gloo/reduce_scatter.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/prefix_store.h"
#include "gloo/rendezvous/store.h"
#include "gloo/transport/tcp/device.h"

ABSL_FLAG(std::string, world_sizes, "2,4", "comma-separated world sizes");
ABSL_FLAG(std::string, sizes_mib, "1,16", "comma-separated buffer sizes in MiB");
ABSL_FLAG(int, iters, 5, "timed iterations per measurement (after one warm-up)");
ABSL_FLAG(std::string, out, "comm_bench.tsv", "results file (TSV)");
ABSL_FLAG(std::string, impls, "ours",
          "comma-separated: ours (GlooCommunicator), gloo (Gloo direct)");
// Child mode, set by the parent through RunRanks.
ABSL_FLAG(bool, child, false, "internal: run as one rank");
ABSL_FLAG(int, rank, 0, "internal");
ABSL_FLAG(int, world_size, 1, "internal");
ABSL_FLAG(std::string, store_host, "127.0.0.1", "internal");
ABSL_FLAG(int, store_port, 0, "internal");

namespace shardline::fsdp {
namespace {

// Gloo's rendezvous over our KvStore, for the direct Gloo context. Gloo reports a failed store
// call only by exception; the benchmark lets it end the child.
class GlooStore : public gloo::rendezvous::Store {
 public:
  explicit GlooStore(KvStore* store) : store_(store) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    absl::Status s = store_->Set(key, absl::string_view(data.data(), data.size()));
    if (!s.ok()) throw std::runtime_error(std::string(s.message()));
  }
  std::vector<char> get(const std::string& key) override {
    auto v = store_->Get({key}, absl::Minutes(2));
    if (!v.ok()) throw std::runtime_error(std::string(v.status().message()));
    return std::vector<char>((*v)[0].begin(), (*v)[0].end());
  }
  void wait(const std::vector<std::string>& keys) override {
    auto v = store_->Get(keys, absl::Minutes(2));
    if (!v.ok()) throw std::runtime_error(std::string(v.status().message()));
  }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds&) override {
    wait(keys);
  }

 private:
  KvStore* store_;
};

std::vector<std::string> ParseList(const std::string& list) {
  return absl::StrSplit(list, ',', absl::SkipEmpty());
}

std::vector<int> ParseInts(const std::string& list) {
  std::vector<int> out;
  for (absl::string_view part : absl::StrSplit(list, ',', absl::SkipEmpty())) {
    int v;
    if (absl::SimpleAtoi(part, &v)) out.push_back(v);
  }
  return out;
}

int Child() {
  const int rank = absl::GetFlag(FLAGS_rank);
  const int world = absl::GetFlag(FLAGS_world_size);
  TcpKvStore::Options store_options;
  store_options.host = absl::GetFlag(FLAGS_store_host);
  store_options.port = absl::GetFlag(FLAGS_store_port);
  auto store = TcpKvStore::Create(store_options);
  if (!store.ok()) {
    std::cout << "store: " << store.status() << std::endl;
    return 2;
  }
  auto groups = CreateCommGroups(*ParallelLayout::Create(world, ShardingStrategy::kFullShard, 0),
                                 rank, store->get(), {});
  if (!groups.ok()) {
    std::cout << "communicators: " << groups.status() << std::endl;
    return 2;
  }
  Communicator& comm = *groups->world;
  const std::vector<std::string> impls = ParseList(absl::GetFlag(FLAGS_impls));
  std::shared_ptr<gloo::rendezvous::Context> gctx;
  if (std::find(impls.begin(), impls.end(), "gloo") != impls.end()) {
    gloo::transport::tcp::attr attr;
    attr.hostname = absl::GetFlag(FLAGS_store_host);
    auto device = gloo::transport::tcp::CreateDevice(attr);
    gctx = std::make_shared<gloo::rendezvous::Context>(rank, world);
    gctx->setTimeout(std::chrono::minutes(5));
    GlooStore base(store->get());
    gloo::rendezvous::PrefixStore prefixed("direct_gloo", base);
    gctx->connectFullMesh(prefixed, device);
  }
  const int iters = absl::GetFlag(FLAGS_iters);
  struct Op {
    const char* name;
    std::function<absl::Status()> run;
  };
  // Times `op` on rank 0's clock between two barriers of the same implementation.
  auto time_op = [&](const std::string& impl, int mib, const Op& op,
                     const std::function<absl::Status()>& barrier) -> bool {
    absl::Status s = op.run();  // Warm-up.
    if (s.ok()) s = barrier();
    const absl::Time start = absl::Now();
    for (int i = 0; i < iters && s.ok(); ++i) s = op.run();
    if (s.ok()) s = barrier();
    const double ms = absl::ToDoubleMilliseconds(absl::Now() - start) / iters;
    if (!s.ok()) {
      std::cout << impl << " " << op.name << ": " << s << std::endl;
      return false;
    }
    if (rank == 0) {
      std::cout << "RESULT " << op.name << " " << impl << " " << world << " " << mib << " " << ms
                << std::endl;
    }
    return true;
  };
  for (int mib : ParseInts(absl::GetFlag(FLAGS_sizes_mib))) {
    const int64_t numel = (static_cast<int64_t>(mib) << 20) / 4 / world * world;
    for (const std::string& impl : impls) {
      at::Tensor full = at::ones({numel}, at::kFloat);
      at::Tensor part = at::ones({numel / world}, at::kFloat);
      if (impl == "ours") {
        const Op ops[] = {
            {"all_gather", [&] { return comm.AllGather(part, full); }},
            // FSDP's form: the flat gradient is dropped afterwards, so the input may be reduced
            // in (no working copy), like Gloo's instance below.
            {"reduce_scatter",
             [&] { return comm.ReduceScatterConsuming(full, part, ReduceOp::kSum); }},
            {"all_reduce", [&] { return comm.AllReduce(full, ReduceOp::kSum); }},
        };
        for (const Op& op : ops) {
          if (!time_op(impl, mib, op, [&] { return comm.Barrier(); })) return 1;
        }
      } else if (impl == "gloo") {
        const auto timeout = std::chrono::minutes(5);
        uint32_t tag = 1000;
        auto barrier = [&]() -> absl::Status {
          gloo::BarrierOptions opts(gctx);
          opts.setTag(tag++);
          opts.setTimeout(timeout);
          gloo::barrier(opts);
          return absl::OkStatus();
        };
        float* full_ptr = full.data_ptr<float>();
        std::vector<int> recv(world, static_cast<int>(numel / world));
        gloo::ReduceScatterHalvingDoubling<float> rs(gctx, {full_ptr}, static_cast<int>(numel),
                                                     recv);
        if (!barrier().ok()) return 1;  // Every rank has registered rs's buffers.
        const Op ops[] = {
            {"all_gather",
             [&] {
               gloo::AllgatherOptions opts(gctx);
               opts.setInput(part.data_ptr<float>(), part.numel());
               opts.setOutput(full_ptr, full.numel());
               opts.setTag(tag++);
               opts.setTimeout(timeout);
               gloo::allgather(opts);
               return absl::OkStatus();
             }},
            {"reduce_scatter",
             [&] {
               rs.run();
               return absl::OkStatus();
             }},
            {"all_reduce",
             [&] {
               gloo::AllreduceOptions opts(gctx);
               opts.setOutput(full_ptr, full.numel());
               opts.setReduceFunction(
                   static_cast<void (*)(void*, const void*, const void*, size_t)>(
                       &gloo::sum<float>));
               opts.setTag(tag++);
               opts.setTimeout(timeout);
               gloo::allreduce(opts);
               return absl::OkStatus();
             }},
        };
        for (const Op& op : ops) {
          if (!time_op(impl, mib, op, barrier)) return 1;
        }
        if (!barrier().ok()) return 1;  // No peer still sends into rs's buffers.
      } else {
        std::cout << "unknown --impls entry " << impl << std::endl;
        return 2;
      }
    }
  }
  return 0;
}

int Parent(const char* self) {
  struct Row {
    std::string op, impl;
    int world, mib;
    double ms;
  };
  std::vector<Row> rows;
  for (int world : ParseInts(absl::GetFlag(FLAGS_world_sizes))) {
    testing::RunRanksResult run =
        testing::RunRanks(self, world,
                          {"--child", absl::StrCat("--iters=", absl::GetFlag(FLAGS_iters)),
                           absl::StrCat("--impls=", absl::GetFlag(FLAGS_impls)),
                           absl::StrCat("--sizes_mib=", absl::GetFlag(FLAGS_sizes_mib))},
                          absl::Minutes(10));
    if (!run.AllSucceeded()) {
      std::cerr << "W=" << world << " failed:\n" << run.Summary();
      return 1;
    }
    for (absl::string_view line : absl::StrSplit(run.ranks[0].output, '\n')) {
      std::vector<std::string> f = absl::StrSplit(line, ' ');
      Row r;
      if (f.size() == 6 && f[0] == "RESULT" && absl::SimpleAtoi(f[3], &r.world) &&
          absl::SimpleAtoi(f[4], &r.mib) && absl::SimpleAtod(f[5], &r.ms)) {
        r.op = f[1];
        r.impl = f[2];
        rows.push_back(r);
      }
    }
  }
  std::ofstream out(absl::GetFlag(FLAGS_out));
  out << "op\timpl\tworld\tmib\tms\tbus_gbps\n";
  std::cout << absl::StrFormat("%-15s %-5s %5s %6s %10s %9s\n", "op", "impl", "W", "MiB", "ms/iter",
                               "bus GB/s");
  for (const Row& r : rows) {
    const double factor = (r.op == "all_reduce" ? 2.0 : 1.0) * (r.world - 1) / r.world;
    const double gbps = factor * r.mib * (1 << 20) / (r.ms / 1e3) / 1e9;
    std::cout << absl::StrFormat("%-15s %-5s %5d %6d %10.2f %9.2f\n", r.op, r.impl, r.world, r.mib,
                                 r.ms, gbps);
    out << r.op << "\t" << r.impl << "\t" << r.world << "\t" << r.mib << "\t" << r.ms << "\t"
        << gbps << "\n";
  }
  std::cout << "wrote " << absl::GetFlag(FLAGS_out) << "\n";
  return 0;
}

}  // namespace
}  // namespace shardline::fsdp

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  if (absl::GetFlag(FLAGS_child)) return shardline::fsdp::Child();
  // RunRanks needs a path it can exec: /proc/self/exe names this very binary.
  return shardline::fsdp::Parent("/proc/self/exe");
}
