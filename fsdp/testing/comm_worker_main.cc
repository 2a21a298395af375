// comm_worker: one rank of the multi-process communicator tests (multi_process_comm_test).
// Started by fsdp/testing/process_launcher.h's RunRanks, which passes --rank, --world_size,
// --store_host and --store_port.
//
//   --scenario=collectives  builds the world/shard/replicate communicators for S =
//       --shard_degree (0: S = W), runs every collective on each group and
//       checks the exact values; prints "collectives ok <group>" per group, exits 1 on a
//       mismatch (printing "CHECK FAILED: ...").
//   --scenario=kill  connects the world group, then rank --victim starts a large all-reduce
//       and SIGKILLs itself while it is in flight; every other rank prints
//       "RESULT code=<code> elapsed_ms=<ms> message=<message>" for its own all-reduce.
//   --scenario=stall  like kill, but rank --victim stays alive and never joins the all-reduce
//       (it leaves after --timeout_ms + 3 s); the others print RESULT lines.
#include <signal.h>
#include <unistd.h>

#include <iostream>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "fsdp/comm_groups.h"
#include "fsdp/file_kv_store.h"
#include "fsdp/tcp_kv_store.h"

ABSL_FLAG(int, rank, 0, "global rank");
ABSL_FLAG(int, world_size, 1, "number of ranks");
ABSL_FLAG(std::string, store_host, "127.0.0.1", "TCP store host");
ABSL_FLAG(int, store_port, 0, "TCP store port");
ABSL_FLAG(std::string, scenario, "collectives", "collectives | kill | stall");
ABSL_FLAG(int, shard_degree, 0, "hybrid_shard_degree of the layout (0: S = W)");
ABSL_FLAG(int, victim, 1, "kill scenario: the rank that dies");
ABSL_FLAG(int, timeout_ms, 20000, "communicator timeout");
ABSL_FLAG(std::string, file_store_dir, "",
          "bootstrap through a FileKvStore in this directory instead of the TCP store");

namespace shardline::fsdp {
namespace {

int failures = 0;

void Check(bool ok, const std::string& what) {
  if (!ok) {
    ++failures;
    std::cout << "CHECK FAILED: " << what << std::endl;
  }
}

void CheckOk(const absl::Status& s, const std::string& what) {
  Check(s.ok(), absl::StrCat(what, ": ", s.ToString()));
}

// Value rank `global` contributes: 1000 * global + i.
at::Tensor Input(int global, int64_t n, at::ScalarType dtype) {
  return (at::arange(n, at::kDouble) + 1000.0 * global).to(dtype);
}

// Runs every collective on `comm`, whose members are the global ranks `members`.
void CheckGroup(Communicator& comm, const std::vector<int>& members, int global_rank) {
  const int size = comm.size();
  const std::string g = comm.name();
  Check(size == static_cast<int>(members.size()), g + ": size");
  Check(members[comm.rank()] == global_rank, g + ": rank order");
  double member_sum = 0;
  for (int m : members) member_sum += 1000.0 * m;

  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    const std::string d = std::string(c10::toString(dtype));
    // All-gather: chunk i is member i's input.
    const int64_t n = 6;
    at::Tensor out = at::zeros({n * size}, dtype);
    CheckOk(comm.AllGather(Input(global_rank, n, dtype), out), g + " all_gather " + d);
    for (int i = 0; i < size; ++i) {
      Check(out.narrow(0, i * n, n).equal(Input(members[i], n, dtype)),
            absl::StrCat(g, " all_gather ", d, " chunk ", i));
    }
    // Reduce-scatter: chunk `rank` of the sum over members (then the average).
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
      const int64_t chunk = 5;
      at::Tensor rs = at::zeros({chunk}, dtype);
      CheckOk(comm.ReduceScatter(Input(global_rank, chunk * size, dtype), rs, op),
              g + " reduce_scatter " + d);
      at::Tensor expected =
          (at::arange(chunk, at::kDouble) + comm.rank() * chunk) * size + member_sum;
      if (op == ReduceOp::kAvg) expected = expected / size;
      const double tol = dtype == at::kBFloat16 ? 1e-2 : 0;
      Check(rs.to(at::kDouble).allclose(expected.to(dtype).to(at::kDouble), tol, 0),
            absl::StrCat(g, " reduce_scatter ", d, op == ReduceOp::kAvg ? " avg" : " sum"));
    }
    // All-reduce.
    at::Tensor t = Input(global_rank, 7, dtype);
    CheckOk(comm.AllReduce(t, ReduceOp::kSum), g + " all_reduce " + d);
    at::Tensor expected = at::arange(7, at::kDouble) * size + member_sum;
    Check(t.to(at::kDouble).allclose(expected.to(dtype).to(at::kDouble), 1e-2, 0),
          g + " all_reduce " + d);
    // Broadcast from the last member.
    at::Tensor b = Input(global_rank, 4, dtype);
    CheckOk(comm.Broadcast(b, size - 1), g + " broadcast " + d);
    Check(b.equal(Input(members[size - 1], 4, dtype)), g + " broadcast " + d);
  }
  CheckOk(comm.Barrier(), g + " barrier");
  std::cout << "collectives ok " << g << std::endl;
}

int Main() {
  const int rank = absl::GetFlag(FLAGS_rank);
  const int world = absl::GetFlag(FLAGS_world_size);
  absl::StatusOr<std::unique_ptr<KvStore>> store;
  if (!absl::GetFlag(FLAGS_file_store_dir).empty()) {
    auto file = FileKvStore::Create({absl::GetFlag(FLAGS_file_store_dir)});
    store = file.ok() ? absl::StatusOr<std::unique_ptr<KvStore>>(std::move(*file))
                      : absl::StatusOr<std::unique_ptr<KvStore>>(file.status());
  } else {
    TcpKvStore::Options store_options;
    store_options.host = absl::GetFlag(FLAGS_store_host);
    store_options.port = absl::GetFlag(FLAGS_store_port);
    auto tcp = TcpKvStore::Create(store_options);
    store = tcp.ok() ? absl::StatusOr<std::unique_ptr<KvStore>>(std::move(*tcp))
                     : absl::StatusOr<std::unique_ptr<KvStore>>(tcp.status());
  }
  if (!store.ok()) {
    std::cout << "store: " << store.status() << std::endl;
    return 2;
  }
  // --shard_degree is the spec's hybrid_shard_degree (0: FULL_SHARD over the world).
  auto layout = ParallelLayout::Create(world, ShardingStrategy::kFullShard,
                                       absl::GetFlag(FLAGS_shard_degree));
  if (!layout.ok()) {
    std::cout << "layout: " << layout.status() << std::endl;
    return 2;
  }
  CommOptions options;
  options.timeout = absl::Milliseconds(absl::GetFlag(FLAGS_timeout_ms));
  auto groups = CreateCommGroups(*layout, rank, store->get(), options);
  if (!groups.ok()) {
    std::cout << "communicators: " << groups.status() << std::endl;
    return 2;
  }

  if (absl::GetFlag(FLAGS_scenario) == "collectives") {
    std::vector<int> all;
    for (int r = 0; r < world; ++r) all.push_back(r);
    CheckGroup(*groups->world, all, rank);
    CheckGroup(*groups->shard, layout->ShardGroupRanks(rank), rank);
    CheckGroup(*groups->replicate, layout->ReplicateGroupRanks(rank), rank);
    return failures == 0 ? 0 : 1;
  }

  if (absl::GetFlag(FLAGS_scenario) == "stall") {
    groups->set_step(3);
    CheckOk(groups->world->Barrier(), "barrier before the stall");
    at::Tensor t = at::ones({1024}, at::kFloat);
    if (rank == absl::GetFlag(FLAGS_victim)) {
      // Alive but never joins: the others must time out, not hang. Leave after they did.
      absl::SleepFor(absl::Milliseconds(absl::GetFlag(FLAGS_timeout_ms) + 3000));
      std::cout << "victim leaves" << std::endl;
      return 0;
    }
    const absl::Time start = absl::Now();
    absl::Status s = groups->world->AllReduce(t, ReduceOp::kSum);
    std::cout << "RESULT code=" << absl::StatusCodeToString(s.code())
              << " elapsed_ms=" << absl::ToInt64Milliseconds(absl::Now() - start)
              << " message=" << s.message() << std::endl;
    return failures == 0 ? 0 : 1;
  }

  if (absl::GetFlag(FLAGS_scenario) == "kill") {
    groups->set_step(7);
    CheckOk(groups->world->Barrier(), "barrier before the kill");
    // 32 MiB: long enough on loopback that the victim dies with the collective in flight.
    at::Tensor t = at::ones({8 << 20}, at::kFloat);
    if (rank == absl::GetFlag(FLAGS_victim)) {
      auto handle = groups->world->AllReduceAsync(t, ReduceOp::kSum);
      absl::SleepFor(absl::Milliseconds(20));
      kill(getpid(), SIGKILL);
    }
    const absl::Time start = absl::Now();
    absl::Status s = groups->world->AllReduce(t, ReduceOp::kSum);
    std::cout << "RESULT code=" << absl::StatusCodeToString(s.code())
              << " elapsed_ms=" << absl::ToInt64Milliseconds(absl::Now() - start)
              << " message=" << s.message() << std::endl;
    return failures == 0 ? 0 : 1;
  }
  std::cout << "unknown scenario" << std::endl;
  return 2;
}

}  // namespace
}  // namespace shardline::fsdp

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return shardline::fsdp::Main();
}
