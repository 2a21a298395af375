// comm_bench: times the Gloo collectives on loopback, one process per rank, and prints a table
// (also written to --out as TSV). A program, not a test: numbers depend on the machine.
//
//   bazel run //fsdp:comm_bench -- --world_sizes=2,4 --sizes_mib=1,16 --iters=5
//
// For each world size W the program starts itself W times through RunRanks (with --child);
// each child builds the world communicator and times all_gather (output of the given size),
// reduce_scatter (input of the given size) and all_reduce (of the given size), fp32.
// "bus GB/s" follows the NCCL-tests convention: the bytes each rank must move, (W-1)/W of the
// buffer for all_gather and reduce_scatter and 2 (W-1)/W for all_reduce, per second; a
// reduce-scatter emulated as all-reduce + slice would show half the bus rate of a real one.
#include <fstream>
#include <iostream>
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
#include "fsdp/communicators.h"
#include "fsdp/tcp_kv_store.h"
#include "fsdp/testing/process_launcher.h"

ABSL_FLAG(std::string, world_sizes, "2,4", "comma-separated world sizes");
ABSL_FLAG(std::string, sizes_mib, "1,16", "comma-separated buffer sizes in MiB");
ABSL_FLAG(int, iters, 5, "timed iterations per measurement (after one warm-up)");
ABSL_FLAG(std::string, out, "comm_bench.tsv", "results file (TSV)");
// Child mode, set by the parent through RunRanks.
ABSL_FLAG(bool, child, false, "internal: run as one rank");
ABSL_FLAG(int, rank, 0, "internal");
ABSL_FLAG(int, world_size, 1, "internal");
ABSL_FLAG(std::string, store_host, "127.0.0.1", "internal");
ABSL_FLAG(int, store_port, 0, "internal");

namespace shardline::fsdp {
namespace {

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
  auto groups = CreateCommunicators(world, world, rank, store->get(), {});
  if (!groups.ok()) {
    std::cout << "communicators: " << groups.status() << std::endl;
    return 2;
  }
  Communicator& comm = *groups->world;
  const int iters = absl::GetFlag(FLAGS_iters);
  for (int mib : ParseInts(absl::GetFlag(FLAGS_sizes_mib))) {
    const int64_t numel = (static_cast<int64_t>(mib) << 20) / 4 / world * world;
    at::Tensor full = at::ones({numel}, at::kFloat);
    at::Tensor part = at::ones({numel / world}, at::kFloat);
    struct Op {
      const char* name;
      std::function<absl::Status()> run;
    };
    const Op ops[] = {
        {"all_gather", [&] { return comm.AllGather(part, full); }},
        {"reduce_scatter", [&] { return comm.ReduceScatter(full, part, ReduceOp::kSum); }},
        {"all_reduce", [&] { return comm.AllReduce(full, ReduceOp::kSum); }},
    };
    for (const Op& op : ops) {
      absl::Status s = op.run();  // Warm-up.
      if (s.ok()) s = comm.Barrier();
      const absl::Time start = absl::Now();
      for (int i = 0; i < iters && s.ok(); ++i) s = op.run();
      if (s.ok()) s = comm.Barrier();
      const double ms = absl::ToDoubleMilliseconds(absl::Now() - start) / iters;
      if (!s.ok()) {
        std::cout << op.name << ": " << s << std::endl;
        return 1;
      }
      if (rank == 0) {
        std::cout << "RESULT " << op.name << " " << world << " " << mib << " " << ms << std::endl;
      }
    }
  }
  return 0;
}

int Parent(const char* self) {
  struct Row {
    std::string op;
    int world, mib;
    double ms;
  };
  std::vector<Row> rows;
  for (int world : ParseInts(absl::GetFlag(FLAGS_world_sizes))) {
    testing::RunRanksResult run = testing::RunRanks(
        self, world,
        {"--child", absl::StrCat("--iters=", absl::GetFlag(FLAGS_iters)),
         absl::StrCat("--sizes_mib=", absl::GetFlag(FLAGS_sizes_mib))},
        absl::Minutes(10));
    if (!run.AllSucceeded()) {
      std::cerr << "W=" << world << " failed:\n" << run.Summary();
      return 1;
    }
    for (absl::string_view line : absl::StrSplit(run.ranks[0].output, '\n')) {
      std::vector<std::string> f = absl::StrSplit(line, ' ');
      Row r;
      if (f.size() == 5 && f[0] == "RESULT" && absl::SimpleAtoi(f[2], &r.world) &&
          absl::SimpleAtoi(f[3], &r.mib) && absl::SimpleAtod(f[4], &r.ms)) {
        r.op = f[1];
        rows.push_back(r);
      }
    }
  }
  std::ofstream out(absl::GetFlag(FLAGS_out));
  out << "op\tworld\tmib\tms\tbus_gbps\n";
  std::cout << absl::StrFormat("%-15s %5s %6s %10s %9s\n", "op", "W", "MiB", "ms/iter",
                               "bus GB/s");
  for (const Row& r : rows) {
    const double factor = (r.op == "all_reduce" ? 2.0 : 1.0) * (r.world - 1) / r.world;
    const double gbps = factor * r.mib * (1 << 20) / (r.ms / 1e3) / 1e9;
    std::cout << absl::StrFormat("%-15s %5d %6d %10.2f %9.2f\n", r.op, r.world, r.mib, r.ms,
                                 gbps);
    out << r.op << "\t" << r.world << "\t" << r.mib << "\t" << r.ms << "\t" << gbps << "\n";
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
