// memory_bench: per-rank memory of FULL_SHARD training against the 16*P/S estimate, for shard
// degrees S = 1, 2, 4, 8 (W = S ranks on loopback, one process each).
//
//   bazel run //bench:memory_bench -- --shards=1,2,4,8 --out=$PWD/bench/results/memory.txt
//
// Each rank builds models/gpt.cc's GPT (sizes from the flags), wraps it with the FSDP engine
// (FULL_SHARD, one unit per Block, AdamW) and trains `steps` steps on random tokens. Reported
// per rank, from the engine's own accounting (FsdpEngine::memory_stats, ShardedOptimizer):
//   persistent   fp32 parameter shard + gradient shard + AdamW exp_avg/exp_avg_sq: what
//                16*P/S estimates (4 bytes x 4 tensors per parameter, divided over S ranks);
//                shards include padding to a multiple of S, which the estimate leaves out;
//   peak         persistent + the peak of gathered full parameters + the peak of unsharded
//                flat gradients (activations and allocator slack not included);
// and from the kernel, the process's resident set: VmRSS before the model exists (LibTorch,
// communicators: the same for every S), the peak while building and wrapping the model (the
// model is built whole on each rank before it is sharded), and the peak during training
// (VmHWM reset through /proc/self/clear_refs after wrapping, when the kernel allows it).
#include <fcntl.h>
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "fsdp/comm_groups.h"
#include "fsdp/fsdp_engine.h"
#include "fsdp/layout.h"
#include "fsdp/sharded_optimizer.h"
#include "fsdp/tcp_kv_store.h"
#include "fsdp/testing/process_launcher.h"
#include "models/model_config.h"
#include "models/model_factory.h"

ABSL_FLAG(std::string, shards, "1,2,4,8", "comma-separated shard degrees S (W = S)");
ABSL_FLAG(int, n_embd, 512, "GPT width");
ABSL_FLAG(int, n_layer, 8, "GPT blocks");
ABSL_FLAG(int, n_head, 8, "GPT heads");
ABSL_FLAG(int, vocab, 256, "vocabulary");
ABSL_FLAG(int, seq_len, 64, "tokens per sequence (block_size too)");
ABSL_FLAG(int, batch, 4, "sequences per rank per step");
ABSL_FLAG(int, steps, 3, "training steps");
ABSL_FLAG(std::string, out, "memory_bench.txt", "results file");
// Child mode, set by the parent through RunRanks.
ABSL_FLAG(bool, child, false, "internal: run as one rank");
ABSL_FLAG(int, rank, 0, "internal");
ABSL_FLAG(int, world_size, 1, "internal");
ABSL_FLAG(std::string, store_host, "127.0.0.1", "internal");
ABSL_FLAG(int, store_port, 0, "internal");

namespace shardline::bench {
namespace {

std::vector<int> ParseInts(const std::string& list) {
  std::vector<int> out;
  for (absl::string_view part : absl::StrSplit(list, ',', absl::SkipEmpty())) {
    int v;
    if (absl::SimpleAtoi(part, &v)) out.push_back(v);
  }
  return out;
}

int64_t ProcStatusBytes(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, field)) {
      int64_t kb = 0;
      std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipWhitespace());
      if (f.size() >= 2 && absl::SimpleAtoi(f[1], &kb)) return kb * 1024;
    }
  }
  return -1;
}

// Resets VmHWM to the current RSS (Linux >= 4.0). Returns false if the kernel refused.
bool ResetPeakRss() {
  const int fd = ::open("/proc/self/clear_refs", O_WRONLY);
  if (fd < 0) return false;
  const bool ok = ::write(fd, "5", 1) == 1;
  ::close(fd);
  return ok;
}

int Fail(absl::string_view what, const absl::Status& s) {
  std::cout << what << ": " << s << std::endl;
  return 2;
}

int Child() {
  const int rank = absl::GetFlag(FLAGS_rank);
  const int world = absl::GetFlag(FLAGS_world_size);
  at::set_num_threads(1);
  fsdp::TcpKvStore::Options so;
  so.host = absl::GetFlag(FLAGS_store_host);
  so.port = absl::GetFlag(FLAGS_store_port);
  auto store = fsdp::TcpKvStore::Create(so);
  if (!store.ok()) return Fail("store", store.status());
  auto comms = fsdp::CreateCommGroups(
      *fsdp::ParallelLayout::Create(world, fsdp::ShardingStrategy::kFullShard, 0), rank,
      store->get(), {});
  if (!comms.ok()) return Fail("communicators", comms.status());
  const int64_t rss_base = ProcStatusBytes("VmRSS:");

  models::ModelConfig mc;
  mc.n_embd = absl::GetFlag(FLAGS_n_embd);
  mc.n_layer = absl::GetFlag(FLAGS_n_layer);
  mc.n_head = absl::GetFlag(FLAGS_n_head);
  mc.vocab_size = absl::GetFlag(FLAGS_vocab);
  mc.block_size = absl::GetFlag(FLAGS_seq_len);
  mc.init_seed = 1;
  auto model = models::CreateModel(mc);
  if (!model.ok()) return Fail("model", model.status());
  auto layout = fsdp::ParallelLayout::Create(world, "FULL_SHARD", 0);
  if (!layout.ok()) return Fail("layout", layout.status());
  fsdp::FsdpEngineOptions eo;
  eo.rank = rank;
  eo.wrap_policy.kind = fsdp::WrapPolicyKind::kTransformerBlock;
  eo.wrap_policy.block_type = (*model)->block_type();
  auto engine = fsdp::FsdpEngine::Create((*model)->module_ptr(), *layout, comms->shard.get(),
                                         comms->replicate.get(), eo);
  if (!engine.ok()) return Fail("engine", engine.status());
  auto opt = fsdp::ShardedOptimizer::Create(engine->get(), {});
  if (!opt.ok()) return Fail("optimizer", opt.status());
  (*model)->set_unit_runner(engine->get());
  const int64_t hwm_build = ProcStatusBytes("VmHWM:");
  // The whole model built before sharding was freed; give glibc's freed heap back to the kernel
  // so that the training peak below measures what training holds, not what malloc kept.
  malloc_trim(0);
  const int64_t rss_wrapped = ProcStatusBytes("VmRSS:");
  const bool reset = ResetPeakRss();

  const int b = absl::GetFlag(FLAGS_batch), t = absl::GetFlag(FLAGS_seq_len);
  at::manual_seed(rank + 1);
  for (int step = 0; step < absl::GetFlag(FLAGS_steps); ++step) {
    (*engine)->set_step(step + 1);
    at::Tensor idx = at::randint(0, mc.vocab_size, {b, t + 1}, at::kLong);
    absl::Status s = (*engine)->BeginForward();
    if (!s.ok()) return Fail("forward", s);
    at::Tensor logits = (*model)->Forward(idx.narrow(1, 0, t));
    at::Tensor loss = at::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}),
                                             idx.narrow(1, 1, t).reshape({-1}));
    s = (*engine)->Backward(loss, /*sync_gradients=*/true);
    if (!s.ok()) return Fail("backward", s);
    auto norm = (*opt)->Step();
    if (!norm.ok()) return Fail("step", norm.status());
  }
  const fsdp::MemoryStats m = (*engine)->memory_stats();
  const int64_t persistent = fsdp::PersistentStateBytes(**engine, **opt);
  const int64_t peak = persistent + m.peak_gathered_param_bytes + m.peak_unsharded_grad_bytes;
  // RESULT S rank P param_shard grad_shard opt_state persistent peak_gathered peak_ungrads
  //        peak rss_base hwm_build hwm_train(-1 if not reset) rss_wrapped
  std::cout << "RESULT " << world << " " << rank << " " << m.num_params << " "
            << m.param_shard_bytes << " " << m.grad_shard_bytes << " " << (*opt)->state_bytes()
            << " " << persistent << " " << m.peak_gathered_param_bytes << " "
            << m.peak_unsharded_grad_bytes << " " << peak << " " << rss_base << " " << hwm_build
            << " " << (reset ? ProcStatusBytes("VmHWM:") : -1) << " " << rss_wrapped << std::endl;
  (*model)->set_unit_runner(nullptr);
  return 0;
}

std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return absl::StrCat(a, " ", b, " ", c);
}

int Parent(const char* self) {
  const std::vector<int> shards = ParseInts(absl::GetFlag(FLAGS_shards));
  const double mib = 1 << 20;
  std::string table =
      absl::StrFormat("%2s %4s %12s %10s %12s %10s %12s %12s %10s %10s %10s %10s\n", "S", "rank",
                      "persist MiB", "16P/S MiB", "persist/est", "peak MiB", "gathered MiB",
                      "ungrads MiB", "RSS0 MiB", "build HWM", "RSS wrap", "train HWM");
  std::string summary = absl::StrFormat("%2s %12s %10s %10s %10s %14s\n", "S", "persist MiB",
                                        "16P/S MiB", "ratio", "peak MiB", "train HWM MiB");
  std::string loads;
  int64_t params = 0;
  for (int s : shards) {
    const std::string load_before = LoadAverage();
    std::vector<std::string> args = {"--child"};
    for (const char* f : {"n_embd", "n_layer", "n_head", "vocab", "seq_len", "batch", "steps"}) {
      absl::CommandLineFlag* flag = absl::FindCommandLineFlag(f);
      args.push_back(absl::StrCat("--", f, "=", flag->CurrentValue()));
    }
    fsdp::testing::RunRanksResult run = fsdp::testing::RunRanks(self, s, args, absl::Minutes(15));
    if (!run.AllSucceeded()) {
      std::cerr << "S=" << s << " failed:\n" << run.Summary();
      return 1;
    }
    loads += absl::StrCat("S=", s, ": load average ", load_before, " -> ", LoadAverage(), "\n");
    int64_t max_persist = 0, max_peak = 0, max_hwm = 0;
    for (const auto& r : run.ranks) {
      for (absl::string_view line : absl::StrSplit(r.output, '\n')) {
        std::vector<std::string> f = absl::StrSplit(line, ' ');
        if (f.size() != 15 || f[0] != "RESULT") continue;
        std::vector<int64_t> v(14);
        for (int i = 0; i < 14; ++i) (void)absl::SimpleAtoi(f[i + 1], &v[i]);
        params = v[2];
        const double est = 16.0 * v[2] / s;
        table += absl::StrFormat(
            "%2d %4d %12.2f %10.2f %12.3f %10.2f %12.2f %12.2f %10.0f %10.0f %10.0f %10s\n", s,
            v[1], v[6] / mib, est / mib, v[6] / est, v[9] / mib, v[7] / mib, v[8] / mib,
            v[10] / mib, v[11] / mib, v[13] / mib,
            v[12] < 0 ? "n/a" : absl::StrFormat("%.0f", v[12] / mib));
        max_persist = std::max(max_persist, v[6]);
        max_peak = std::max(max_peak, v[9]);
        max_hwm = std::max(max_hwm, v[12]);
      }
    }
    const double est = 16.0 * params / s;
    summary += absl::StrFormat("%2d %12.2f %10.2f %10.3f %10.2f %14.0f\n", s, max_persist / mib,
                               est / mib, max_persist / est, max_peak / mib, max_hwm / mib);
  }
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  std::string cpu;
  {
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (cpu.empty() && std::getline(in, line)) {
      if (absl::StartsWith(line, "model name")) cpu = line.substr(line.find(':') + 2);
    }
  }
  const std::string text = absl::StrCat(
      "memory_bench: per-rank memory, FULL_SHARD, W = S, against 16*P/S\n",
      absl::FormatTime("date %Y-%m-%d %H:%M:%S UTC", absl::Now(), absl::UTCTimeZone()), "; host ",
      host, "; nproc ", sysconf(_SC_NPROCESSORS_ONLN), "; cpu ", cpu, "\n",
      absl::StrFormat("model: GPT n_embd %d, n_layer %d, n_head %d, vocab %d, seq %d: P = %d "
                      "parameters (%.2f MiB fp32); batch %d per rank, %d steps, AdamW\n\n",
                      absl::GetFlag(FLAGS_n_embd), absl::GetFlag(FLAGS_n_layer),
                      absl::GetFlag(FLAGS_n_head), absl::GetFlag(FLAGS_vocab),
                      absl::GetFlag(FLAGS_seq_len), params, params * 4 / mib,
                      absl::GetFlag(FLAGS_batch), absl::GetFlag(FLAGS_steps)),
      "largest rank per S:\n", summary, "\nper rank:\n", table,
      "\npersist = parameter shard + gradient shard + AdamW state (engine accounting, padding "
      "included); peak = persist + peak gathered parameters + peak unsharded gradients "
      "(no activations); RSS0 = resident set before the model exists; build HWM = peak "
      "resident set while building and wrapping (the whole model exists on every rank "
      "then); RSS wrap = resident set after wrapping and malloc_trim; train HWM = peak "
      "resident set during the training steps (reset after wrapping).\n\n",
      loads);
  std::cout << text;
  std::ofstream(absl::GetFlag(FLAGS_out)) << text;
  std::cout << "wrote " << absl::GetFlag(FLAGS_out) << "\n";
  return 0;
}

}  // namespace
}  // namespace shardline::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  if (absl::GetFlag(FLAGS_child)) return shardline::bench::Child();
  return shardline::bench::Parent("/proc/self/exe");
}
