// checkpoint_bench: checkpoint save/load throughput against the disk's own sequential write and
// read speed (measured in the same run, same directory), and the step-time cost of async saves.
//
//   checkpoint_bench [--dir=/tmp/ckpt_bench] [--mb=N] [--steps=20] [--every=10] [--reps=3]
//                    [--out=FILE]
//
// One process, W = 1 (communicator groups of one rank need no peers), a TinyGpt scaled to ~15M
// parameters: a checkpoint of parameters + AdamW state is ~180 MB. Reads are measured with the
// page cache dropped for the files involved (posix_fadvise DONTNEED after fsync), so they come
// from the disk where the kernel honours it. Prints a table and writes it to --out.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/utils.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "checkpoint/format.h"
#include "checkpoint/sharded_checkpoint.h"
#include "fsdp/comm_groups.h"
#include "fsdp/fsdp_engine.h"
#include "fsdp/layout.h"
#include "fsdp/sharded_optimizer.h"
#include "fsdp/tcp_kv_store.h"
#include "fsdp/testing/tiny_gpt.h"

namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

void DropCache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

void DropCacheTree(const std::string& dir) {
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) DropCache(e.path().string());
  }
}

int64_t TreeBytes(const std::string& dir) {
  int64_t n = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) n += static_cast<int64_t>(e.file_size());
  }
  return n;
}

// Sequential write (1 MiB writes + fsync) and read of `mb` MiB: MB/s each.
std::pair<double, double> DiskSpeed(const std::string& dir, int mb) {
  const std::string path = dir + "/disk_probe.bin";
  std::vector<char> buf(1 << 20, 'x');
  auto t = Clock::now();
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  for (int i = 0; i < mb; ++i) {
    if (::write(fd, buf.data(), buf.size()) != static_cast<ssize_t>(buf.size())) break;
  }
  ::fsync(fd);
  ::close(fd);
  const double w = mb / Since(t);
  DropCache(path);
  t = Clock::now();
  fd = ::open(path.c_str(), O_RDONLY);
  while (::read(fd, buf.data(), buf.size()) > 0) {
  }
  ::close(fd);
  const double r = mb / Since(t);
  std::filesystem::remove(path);
  return {w, r};
}

struct Rig {
  std::unique_ptr<shardline::fsdp::TcpKvStore> store;
  shardline::fsdp::CommGroups comms;
  shardline::fsdp::testing::TinyGpt model{nullptr};
  std::unique_ptr<shardline::fsdp::FsdpEngine> engine;
  std::unique_ptr<shardline::fsdp::ShardedOptimizer> opt;
};

std::unique_ptr<Rig> MakeRig() {
  using namespace shardline;
  auto rig = std::make_unique<Rig>();
  fsdp::TcpKvStore::Options so;
  so.serve = true;
  rig->store = *fsdp::TcpKvStore::Create(so);
  rig->comms =
      *fsdp::CreateCommGroups(fsdp::ParallelLayout(), 0, rig->store.get(), fsdp::CommOptions());
  fsdp::testing::TinyGptConfig c;
  c.vocab = 4096;
  c.block_size = 16;
  c.n_embd = 512;
  c.n_head = 8;
  c.mlp_hidden = 2048;
  c.n_layer = 4;
  torch::manual_seed(1);
  rig->model = fsdp::testing::TinyGpt(c);
  fsdp::FsdpEngineOptions eo;
  eo.wrap_policy.kind = fsdp::WrapPolicyKind::kTransformerBlock;
  eo.wrap_policy.block_type = "Block";
  rig->engine =
      *fsdp::FsdpEngine::Create(rig->model.ptr(), *fsdp::ParallelLayout::Create(1, "NO_SHARD", 0),
                                rig->comms.shard.get(), rig->comms.replicate.get(), eo);
  rig->opt = *fsdp::ShardedOptimizer::Create(rig->engine.get(), fsdp::ShardedOptimizerOptions());
  return rig;
}

double TrainStep(Rig& rig, int step) {
  at::Tensor idx = at::randint(0, 4096, {4, 17}, at::kLong);
  auto t = Clock::now();
  (void)rig.engine->BeginForward();
  at::Tensor loss = rig.model->loss(idx.narrow(1, 0, 16), idx.narrow(1, 1, 16), rig.engine.get());
  (void)rig.engine->Backward(loss, true);
  (void)rig.opt->Step();
  (void)step;
  return Since(t);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace shardline;
  std::string dir = "/tmp/ckpt_bench", out;
  int mb = 0, steps = 20, every = 10, reps = 3;  // mb 0: the checkpoint's own size.
  for (int i = 1; i < argc; ++i) {
    std::vector<std::string> kv = absl::StrSplit(argv[i], absl::MaxSplits('=', 1));
    if (kv.size() != 2) continue;
    if (kv[0] == "--dir") dir = kv[1];
    if (kv[0] == "--out") out = kv[1];
    if (kv[0] == "--mb") (void)absl::SimpleAtoi(kv[1], &mb);
    if (kv[0] == "--steps") (void)absl::SimpleAtoi(kv[1], &steps);
    if (kv[0] == "--every") (void)absl::SimpleAtoi(kv[1], &every);
    if (kv[0] == "--reps") (void)absl::SimpleAtoi(kv[1], &reps);
  }
  at::set_num_threads(1);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::unique_ptr<Rig> rig = MakeRig();
  checkpoint::Checkpointer::Options o;
  o.root = dir + "/ckpt";
  o.optimizer_kind = "adamw";
  // Retention is applied by hand below, outside the timed region: deleting the superseded
  // checkpoint (~50 ms per 168 MiB here) is not writing, and the probe's own delete is not
  // timed either.
  o.keep_last = 0;
  auto ckpt = *checkpoint::Checkpointer::Create(o, rig->engine.get(), rig->opt.get(),
                                                rig->comms.world.get());
  TrainStep(*rig, 0);  // AdamW state exists after one step.
  {
    // An untimed first save: the probe writes as many bytes as a checkpoint has (its fsync and
    // file-creation costs then weigh the same), and first-touch costs stay out of the figures.
    checkpoint::TrainingProgress p0;
    p0.step = 0;
    absl::Status s0 = ckpt->Save(p0, false);
    if (!s0.ok()) {
      std::cerr << "save: " << s0 << "\n";
      return 1;
    }
    if (mb <= 0) {
      mb = static_cast<int>(TreeBytes(checkpoint::StepDir(o.root, 0)) / 1048576.0 + 0.5);
    }
    std::filesystem::remove_all(checkpoint::StepDir(o.root, 0));
  }
  // This machine is shared and noisy: each figure is the median of `reps` rounds, and each
  // round measures the disk right before the checkpoint.
  std::vector<double> dw, dr, sv, ld;
  double bytes_mb = 0;
  for (int rep = 0; rep < reps; ++rep) {
    const auto [w, r] = DiskSpeed(dir, mb);
    dw.push_back(w);
    dr.push_back(r);
    checkpoint::TrainingProgress p;
    p.step = 1 + rep;
    auto t = Clock::now();
    absl::Status s = ckpt->Save(p, false);
    const double save_s = Since(t);
    if (!s.ok()) {
      std::cerr << "save: " << s << "\n";
      return 1;
    }
    bytes_mb = TreeBytes(checkpoint::StepDir(o.root, p.step)) / 1048576.0;
    DropCacheTree(o.root);
    t = Clock::now();
    auto loaded = ckpt->Load(-1);
    const double load_s = Since(t);
    if (!loaded.ok()) {
      std::cerr << "load: " << loaded.status() << "\n";
      return 1;
    }
    sv.push_back(bytes_mb / save_s);
    ld.push_back(bytes_mb / load_s);
    if (rep > 0) std::filesystem::remove_all(checkpoint::StepDir(o.root, p.step - 1));
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double disk_w = median(dw), disk_r = median(dr), save_mbs = median(sv),
               load_mbs = median(ld);
  absl::Status s;

  // Step time without and with async saves, interleaved step by step (a plain step, then a step
  // of the saving run) so that the load of other processes on this shared machine hits both
  // alike. The saving run's steps include the Save call (host copy, waiting for the previous
  // save); its writes overlap the following steps.
  double base = 0, with_async = 0;
  auto t_all = Clock::now();
  for (int i = 0; i < steps; ++i) {
    base += TrainStep(*rig, i);
    auto ts = Clock::now();
    TrainStep(*rig, i);
    if ((i + 1) % every == 0) {
      checkpoint::TrainingProgress q;
      q.step = 100 + i;
      s = ckpt->Save(q, true);
      if (!s.ok()) {
        std::cerr << "async save: " << s << "\n";
        return 1;
      }
    }
    with_async += Since(ts);
  }
  (void)ckpt->WaitForPendingSave();
  const double wall_async = Since(t_all);

  std::string table = absl::StrFormat(
      "checkpoint_bench (W=1, TinyGpt ~%.0fM params, checkpoint %.0f MiB, dir %s)\n"
      "%-34s %10s\n"
      "%-34s %10.0f\n%-34s %10.0f\n"
      "%-34s %10.0f  (%.0f%% of disk write; median of %d)\n"
      "%-34s %10.0f  (%.0f%% of disk read; median of %d)\n"
      "%-34s %10.2f\n%-34s %10.2f  (%+.1f%%; %d steps, async save every %d; wall %.2fs)\n",
      bytes_mb * 1048576.0 / 12 / 1e6, bytes_mb, dir, "measure", "value", "disk seq write MiB/s",
      disk_w, "disk seq read MiB/s", disk_r, "checkpoint save MiB/s", save_mbs,
      100 * save_mbs / disk_w, reps, "checkpoint load MiB/s", load_mbs, 100 * load_mbs / disk_r,
      reps, "step ms (no save)", 1000 * base / steps, "step ms (async save)",
      1000 * with_async / steps, 100 * (with_async / base - 1), steps, every, wall_async);
  std::cout << table;
  if (!out.empty()) std::ofstream(out) << table;
  std::filesystem::remove_all(dir);
  return 0;
}
