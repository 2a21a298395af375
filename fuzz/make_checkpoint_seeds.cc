// Writes a small real checkpoint with the project's own writer (two shard files, parameters and
// optimizer state split across them) and turns it into fuzz seeds:
//   <out>/manifest/real_manifest.json           its MANIFEST.json
//   <out>/checkpoint_reader/real_checkpoint      MANIFEST.json, "@@@@@@@@" line, shard 0, ...
//   <out>/checkpoint_reader/truncated_shard      the same with shard 1 cut short
//
//   bazel run //fuzz:make_checkpoint_seeds -- $PWD/fuzz/corpus
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "checkpoint/format.h"
#include "checkpoint/shard_writer.h"

namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool WriteAll(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
  return out.good();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_checkpoint_seeds <out_dir>\n");
    return 2;
  }
  const std::string out = argv[1];
  char templ[] = "/tmp/ckpt_seed_XXXXXX";
  if (::mkdtemp(templ) == nullptr) return 1;
  const std::string step_dir = shardline::checkpoint::StepDir(templ, 3);

  std::vector<float> w(12), b(5), m(12);
  for (int i = 0; i < 12; ++i) w[i] = 0.25f * i - 1.0f, m[i] = 0.01f * i;
  for (int i = 0; i < 5; ++i) b[i] = -0.5f * i;
  using shardline::checkpoint::SliceData;
  // Shard 0: first half of each tensor; shard 1: the rest.
  const std::vector<SliceData> s0 = {{"wte.weight", {4, 3}, 0, 6, w.data()},
                                     {"ln.bias", {5}, 0, 3, b.data()},
                                     {"wte.weight#exp_avg", {4, 3}, 0, 6, m.data()}};
  const std::vector<SliceData> s1 = {{"wte.weight", {4, 3}, 6, 12, w.data() + 6},
                                     {"ln.bias", {5}, 3, 5, b.data() + 3},
                                     {"wte.weight#exp_avg", {4, 3}, 6, 12, m.data() + 6}};
  for (int i = 0; i < 2; ++i) {
    auto r = shardline::checkpoint::WriteShard(step_dir, i, "seed", i == 0 ? s0 : s1);
    if (!r.ok()) {
      std::fprintf(stderr, "%s\n", r.status().ToString().c_str());
      return 1;
    }
  }
  shardline::checkpoint::CheckpointMeta meta;
  meta.step = 3;
  meta.world_size = 2;
  meta.strategy = "FULL_SHARD";
  meta.shard_degree = 2;
  meta.optimizer = "adamw";
  meta.optimizer_step = 3;
  meta.job_id = "job-1";
  meta.aliases["lm_head.weight"] = "wte.weight";
  const absl::Status c =
      shardline::checkpoint::CommitCheckpoint(step_dir, 2, "seed", meta, absl::Seconds(10));
  if (!c.ok()) {
    std::fprintf(stderr, "%s\n", c.ToString().c_str());
    return 1;
  }
  const std::string manifest = ReadAll(step_dir + "/MANIFEST.json");
  const std::string d0 = ReadAll(step_dir + "/" + shardline::checkpoint::DataFileName(0));
  const std::string d1 = ReadAll(step_dir + "/" + shardline::checkpoint::DataFileName(1));
  const std::string sep = "\n@@@@@@@@\n";
  ::mkdir((out + "/manifest").c_str(), 0755);
  ::mkdir((out + "/checkpoint_reader").c_str(), 0755);
  bool ok = WriteAll(out + "/manifest/real_manifest.json", manifest);
  ok &= WriteAll(out + "/checkpoint_reader/real_checkpoint",
                 absl::StrCat(manifest, sep, d0, sep, d1));
  ok &= WriteAll(out + "/checkpoint_reader/truncated_shard",
                 absl::StrCat(manifest, sep, d0, sep, d1.substr(0, d1.size() - 5)));
  std::printf("wrote seeds from %s\n", step_dir.c_str());
  return ok ? 0 : 1;
}
