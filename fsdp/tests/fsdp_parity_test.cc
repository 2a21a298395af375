// Multi-process FSDP parity on loopback: every strategy, W in {2, 3, 4, 6}, every valid shard
// degree, trains TinyGpt 20 steps with AdamW as W real processes talking Gloo, and must match
// one unsharded LibTorch process trained on the whole global batch (per-step loss within 1e-5
// relative, final parameters within 1e-4). The unsharded run must also match the golden losses
// in testdata/golden_losses_adamw.txt.
//
// This binary is both the test and its ranks: RunRanks (fsdp/testing/process_launcher.h) starts
// it again with --parity_config=..., --rank=... and the store address; main() then runs one rank
// and prints "LOSS <step> <loss>" lines (and writes rank 0's final parameters to --out).
//
// Regenerate the golden file: SHARDLINE_WRITE_GOLDEN=<path> fsdp_parity_test
//   --gtest_filter='*Golden*'.
#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "fsdp/gloo_communicator.h"
#include "fsdp/layout.h"
#include "fsdp/prefix_kv_store.h"
#include "fsdp/tcp_kv_store.h"
#include "fsdp/testing/process_launcher.h"
#include "fsdp/tests/parity.h"
#include "gtest/gtest.h"

namespace shardline::fsdp::testing {
namespace {

// ---- The rank side -------------------------------------------------------------------------

struct WorkerArgs {
  int rank = 0, world_size = 1, store_port = 0, die_at_step = -1, die_rank = -1;
  std::string store_host = "127.0.0.1", config, out;
  int timeout_ms = 60000;
};

bool ParseWorkerArgs(int argc, char** argv, WorkerArgs* a) {
  bool worker = false;
  for (int i = 1; i < argc; ++i) {
    std::vector<std::string> kv = absl::StrSplit(argv[i], absl::MaxSplits('=', 1));
    if (kv.size() != 2) continue;
    const std::string& k = kv[0];
    const std::string& v = kv[1];
    if (k == "--parity_config") {
      a->config = v;
      worker = true;
    } else if (k == "--rank")
      (void)absl::SimpleAtoi(v, &a->rank);
    else if (k == "--world_size")
      (void)absl::SimpleAtoi(v, &a->world_size);
    else if (k == "--store_host")
      a->store_host = v;
    else if (k == "--store_port")
      (void)absl::SimpleAtoi(v, &a->store_port);
    else if (k == "--out")
      a->out = v;
    else if (k == "--die_at_step")
      (void)absl::SimpleAtoi(v, &a->die_at_step);
    else if (k == "--die_rank")
      (void)absl::SimpleAtoi(v, &a->die_rank);
    else if (k == "--timeout_ms")
      (void)absl::SimpleAtoi(v, &a->timeout_ms);
  }
  return worker;
}

absl::StatusOr<std::unique_ptr<Communicator>> Connect(KvStore* base, const std::string& name,
                                                      int rank, int size, absl::Duration timeout) {
  if (size == 1) return std::unique_ptr<Communicator>();
  PrefixKvStore store(base, name);
  GlooCommunicator::Options o;
  o.name = name;
  o.rank = rank;
  o.size = size;
  o.store = &store;
  o.timeout = timeout;
  ASSIGN_OR_RETURN(std::unique_ptr<GlooCommunicator> c, GlooCommunicator::Create(o));
  return std::unique_ptr<Communicator>(std::move(c));
}

absl::Status RunWorker(const WorkerArgs& a) {
  ASSIGN_OR_RETURN(ParityConfig config, ParityConfig::Decode(a.config));
  if (a.rank == a.die_rank) config.die_at_step = a.die_at_step;
  ASSIGN_OR_RETURN(ParallelLayout layout, ParallelLayout::Create(a.world_size, config.strategy,
                                                                 config.hybrid_shard_degree));
  TcpKvStore::Options so;
  so.host = a.store_host;
  so.port = a.store_port;
  ASSIGN_OR_RETURN(std::unique_ptr<TcpKvStore> store, TcpKvStore::Create(so));
  const absl::Duration timeout = absl::Milliseconds(a.timeout_ms);
  const int s = layout.shard_degree(), r = layout.replicate_degree();
  ASSIGN_OR_RETURN(std::unique_ptr<Communicator> shard,
                   Connect(store.get(), absl::StrCat("shard[", layout.ReplicateIndex(a.rank), "]"),
                           layout.ShardIndex(a.rank), s, timeout));
  ASSIGN_OR_RETURN(std::unique_ptr<Communicator> replicate,
                   Connect(store.get(), absl::StrCat("replicate[", layout.ShardIndex(a.rank), "]"),
                           layout.ReplicateIndex(a.rank), r, timeout));
  ASSIGN_OR_RETURN(ParityResult result, RunFsdpRank(config, a.rank, shard.get(), replicate.get()));
  for (size_t i = 0; i < result.losses.size(); ++i) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "LOSS %zu %.12g", i, result.losses[i]);
    std::cout << buf << std::endl;
    std::snprintf(buf, sizeof(buf), "NORM %zu %.12g", i, result.grad_norms[i]);
    std::cout << buf << std::endl;
  }
  if (a.rank == 0 && !a.out.empty()) {
    std::ofstream out(a.out);
    for (const auto& [name, t] : result.params) {
      at::Tensor flat = t.reshape({-1}).to(at::kDouble).contiguous();
      out << name << " " << flat.numel();
      const double* d = flat.data_ptr<double>();
      char buf[32];
      for (int64_t i = 0; i < flat.numel(); ++i) {
        std::snprintf(buf, sizeof(buf), " %.9g", d[i]);
        out << buf;
      }
      out << "\n";
    }
    if (!out.good()) return absl::InternalError(absl::StrCat("cannot write ", a.out));
  }
  return absl::OkStatus();
}

// ---- The test side -------------------------------------------------------------------------

std::string SelfPath() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, n) : std::string();
}

std::string TempDir() {
  const char* t = std::getenv("TEST_TMPDIR");
  return t != nullptr ? t : "/tmp";
}

const ParityResult& Reference(bool sgd) {
  static auto* cache = new std::map<bool, ParityResult>();
  auto it = cache->find(sgd);
  if (it == cache->end()) {
    ParityConfig c;
    c.sgd = sgd;
    it = cache->emplace(sgd, RunReference(c)).first;
  }
  return it->second;
}

std::map<std::string, std::vector<double>> ReadParams(const std::string& path) {
  std::map<std::string, std::vector<double>> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string name;
    int64_t n = 0;
    ls >> name >> n;
    std::vector<double>& v = out[name];
    v.resize(n);
    for (int64_t i = 0; i < n; ++i) ls >> v[i];
  }
  return out;
}

class FsdpParity : public ::testing::TestWithParam<ParityConfig> {};

TEST_P(FsdpParity, MatchesSingleProcessTraining) {
  const ParityConfig& c = GetParam();
  const ParityResult& ref = Reference(c.sgd);
  const std::string out = absl::StrCat(TempDir(), "/params_", c.Name(), ".txt");
  RunRanksOptions opts;
  opts.timeout = absl::Seconds(240);
  RunRanksResult run =
      RunRanks(SelfPath(), c.world_size,
               {absl::StrCat("--parity_config=", c.Encode()), "--out=" + out}, opts);
  ASSERT_TRUE(run.AllSucceeded()) << run.Summary();

  // Global loss per step = mean of the ranks' losses (equal shares of the global batch).
  std::vector<double> mean(c.steps, 0.0);
  for (const RankResult& r : run.ranks) {
    int seen = 0;
    for (absl::string_view line : absl::StrSplit(r.output, '\n')) {
      std::vector<std::string> f = absl::StrSplit(line, ' ');
      if (f.size() != 3 || (f[0] != "LOSS" && f[0] != "NORM")) continue;
      int step = 0;
      double v = 0;
      ASSERT_TRUE(absl::SimpleAtoi(f[1], &step) && absl::SimpleAtod(f[2], &v)) << line;
      ASSERT_LT(step, c.steps);
      if (f[0] == "NORM") {
        // Every rank computes the same global norm.
        EXPECT_NEAR(v, ref.grad_norms[step], 1e-4 * ref.grad_norms[step])
            << "rank " << r.rank << " step " << step;
        continue;
      }
      mean[step] += v / c.world_size;
      ++seen;
    }
    ASSERT_EQ(seen, c.steps) << "rank " << r.rank << ":\n" << r.output;
  }
  for (int step = 0; step < c.steps; ++step) {
    EXPECT_NEAR(mean[step], ref.losses[step], 1e-5 * std::abs(ref.losses[step])) << "step " << step;
  }
  auto params = ReadParams(out);
  ASSERT_EQ(params.size(), 26u);  // Every unique parameter (head.weight is wte.weight).
  for (const auto& [name, values] : params) {
    ASSERT_TRUE(ref.params.count(name)) << name;
    at::Tensor expected = ref.params.at(name).reshape({-1}).to(at::kDouble);
    ASSERT_EQ(static_cast<int64_t>(values.size()), expected.numel()) << name;
    double worst = 0;
    const double* e = expected.data_ptr<double>();
    for (size_t i = 0; i < values.size(); ++i) worst = std::max(worst, std::abs(values[i] - e[i]));
    EXPECT_LE(worst, 1e-4) << name;
  }
}

std::vector<ParityConfig> AllConfigs() {
  std::vector<ParityConfig> out;
  for (int w : {2, 3, 4, 6}) {
    for (const char* s : {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD"}) {
      ParityConfig c;
      c.strategy = s;
      c.world_size = w;
      out.push_back(c);
    }
    for (const char* s : {"HYBRID_SHARD", "HYBRID_SHARD_ZERO2"}) {
      for (int d = 2; d <= w; ++d) {
        if (w % d != 0) continue;
        ParityConfig c;
        c.strategy = s;
        c.world_size = w;
        c.hybrid_shard_degree = d;
        out.push_back(c);
      }
    }
  }
  // Other wrap policies, gradient accumulation (no_sync) and SGD on a few layouts.
  auto variant = [&](const char* s, int w, int d, WrapPolicyKind wrap, int mb, bool sgd,
                     int prefetch = 0) {
    ParityConfig c;
    c.strategy = s;
    c.world_size = w;
    c.hybrid_shard_degree = d;
    c.wrap = wrap;
    c.micro_batches = mb;
    c.sgd = sgd;
    c.prefetch = prefetch;
    out.push_back(c);
  };
  variant("FULL_SHARD", 4, 0, WrapPolicyKind::kPerLayer, 1, false);
  variant("HYBRID_SHARD", 4, 2, WrapPolicyKind::kPerParameter, 1, false);
  variant("SHARD_GRAD_OP", 3, 0, WrapPolicyKind::kSizeBased, 1, false);
  variant("FULL_SHARD", 2, 0, WrapPolicyKind::kTransformerBlock, 3, false);
  variant("HYBRID_SHARD_ZERO2", 6, 2, WrapPolicyKind::kTransformerBlock, 2, false);
  variant("NO_SHARD", 4, 0, WrapPolicyKind::kTransformerBlock, 3, false);
  variant("HYBRID_SHARD", 4, 2, WrapPolicyKind::kTransformerBlock, 1, true);
  variant("NO_SHARD", 3, 0, WrapPolicyKind::kTransformerBlock, 1, true);
  variant("FULL_SHARD", 2, 0, WrapPolicyKind::kTransformerBlock, 2, true);
  // Async prefetch (forward + backward pre / post) over real Gloo async collectives.
  variant("FULL_SHARD", 4, 0, WrapPolicyKind::kTransformerBlock, 1, false, 1);
  variant("HYBRID_SHARD", 4, 2, WrapPolicyKind::kPerLayer, 3, false, 2);
  return out;
}

INSTANTIATE_TEST_SUITE_P(AllLayouts, FsdpParity, ::testing::ValuesIn(AllConfigs()),
                         [](const ::testing::TestParamInfo<ParityConfig>& info) {
                           return info.param.Name();
                         });

// Activation checkpointing over real Gloo processes: every rank's printed losses and norms
// (%.12g of float values) and rank 0's final parameters (%.9g: float round-trips) are the same
// text with and without it, i.e. bit-identical (FULL_SHARD W = 3 with forward + BACKWARD_PRE
// prefetch, so the recompute runs between real async gathers).
TEST(FsdpParityCheckpointing, MultiProcessRunIsBitIdenticalToWithout) {
  ParityConfig c;
  c.strategy = "FULL_SHARD";
  c.world_size = 3;
  c.prefetch = 1;
  std::string outputs[2], params[2];
  for (int ac = 0; ac < 2; ++ac) {
    c.activation_checkpointing = ac == 1;
    const std::string out = absl::StrCat(TempDir(), "/params_", c.Name(), ".txt");
    RunRanksOptions opts;
    opts.timeout = absl::Seconds(240);
    RunRanksResult run =
        RunRanks(SelfPath(), c.world_size,
                 {absl::StrCat("--parity_config=", c.Encode()), "--out=" + out}, opts);
    ASSERT_TRUE(run.AllSucceeded()) << run.Summary();
    for (const RankResult& r : run.ranks) {
      for (absl::string_view line : absl::StrSplit(r.output, '\n')) {
        if (absl::StartsWith(line, "LOSS ") || absl::StartsWith(line, "NORM ")) {
          absl::StrAppend(&outputs[ac], "rank ", r.rank, " ", line, "\n");
        }
      }
    }
    std::ifstream in(out);
    std::stringstream text;
    text << in.rdbuf();
    params[ac] = text.str();
  }
  EXPECT_NE(outputs[0].find("LOSS 19 "), std::string::npos) << outputs[0];
  EXPECT_EQ(outputs[0], outputs[1]);
  EXPECT_GT(params[0].size(), 1000u);
  EXPECT_TRUE(params[0] == params[1]) << "final parameters differ";
}

TEST(FsdpParityGolden, UnshardedRunMatchesGoldenLosses) {
  const ParityResult& ref = Reference(/*sgd=*/false);
  if (const char* path = std::getenv("SHARDLINE_WRITE_GOLDEN")) {
    std::ofstream out(path);
    out << "# TinyGpt (fsdp/testing/tiny_gpt.h), 20 AdamW steps on the global batch of\n"
        << "# fsdp/tests/parity.cc, single process, LibTorch 2.11 CPU: step loss\n"
        << FormatGoldenLosses(ref.losses);
  }
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const std::string path = srcdir != nullptr
                               ? RunfilePath("fsdp/tests/testdata/golden_losses_adamw.txt")
                               : "fsdp/tests/testdata/golden_losses_adamw.txt";
  absl::StatusOr<std::vector<double>> golden = ReadGoldenLosses(path);
  ASSERT_TRUE(golden.ok()) << golden.status();
  ASSERT_EQ(golden->size(), ref.losses.size());
  for (size_t i = 0; i < ref.losses.size(); ++i) {
    EXPECT_NEAR(ref.losses[i], (*golden)[i], 1e-5 * std::abs((*golden)[i])) << "step " << i;
  }
  EXPECT_LT(ref.losses.back(), ref.losses.front() - 0.5) << "the model should learn";
}

// A rank that dies (SIGKILL) in the middle of training makes every other rank fail within the
// collective timeout with an error naming the group, the operation and the step.
TEST(FsdpParityFailure, PeerDyingMidTrainingFailsTheOthersWithinTimeout) {
  ParityConfig c;
  c.strategy = "HYBRID_SHARD";
  c.world_size = 4;
  c.hybrid_shard_degree = 2;
  RunRanksOptions opts;
  opts.timeout = absl::Seconds(60);
  const absl::Time start = absl::Now();
  RunRanksResult run = RunRanks(SelfPath(), c.world_size,
                                {absl::StrCat("--parity_config=", c.Encode()), "--die_rank=1",
                                 "--die_at_step=3", "--timeout_ms=5000"},
                                opts);
  EXPECT_LT(absl::Now() - start, absl::Seconds(45));
  ASSERT_EQ(run.ranks[1].exit_code, -SIGKILL) << run.Summary();
  // Rank 0 shares shard group shard[0] with rank 1; ranks 2 and 3 fail in their own groups or
  // when rank 0's group breaks. Each must fail with a named collective error, none may hang.
  for (int r : {0, 2, 3}) {
    EXPECT_FALSE(run.ranks[r].timed_out) << "rank " << r;
    EXPECT_EQ(run.ranks[r].exit_code, 3) << "rank " << r << ":\n" << run.ranks[r].output;
    EXPECT_TRUE(absl::StrContains(run.ranks[r].output, "FAILED code=")) << run.ranks[r].output;
  }
  EXPECT_TRUE(absl::StrContains(run.ranks[0].output, "group shard[0] op")) << run.ranks[0].output;
  EXPECT_TRUE(absl::StrContains(run.ranks[0].output, "step 3")) << run.ranks[0].output;
}

}  // namespace
}  // namespace shardline::fsdp::testing

int main(int argc, char** argv) {
  at::set_num_threads(1);
  shardline::fsdp::testing::WorkerArgs args;
  if (shardline::fsdp::testing::ParseWorkerArgs(argc, argv, &args)) {
    absl::Status s = shardline::fsdp::testing::RunWorker(args);
    if (!s.ok()) {
      std::cout << "FAILED code=" << absl::StatusCodeToString(s.code())
                << " message=" << s.message() << std::endl;
      return 3;
    }
    return 0;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
