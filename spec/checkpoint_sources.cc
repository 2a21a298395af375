#include "spec/checkpoint_sources.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "spec/shown.h"

namespace shardline::spec {
namespace {

// checkpoint.init_from_safetensors must be a safetensors file, or the job fails only once its
// trainers start: an 8-byte little-endian header length that fits the file, then a JSON object.
void CheckSafetensorsHeader(const std::string& path, std::vector<std::string>* out) {
  struct stat st;
  if (path.empty() || stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return;  // reported
  std::ifstream in(path, std::ios::binary);
  unsigned char head[9] = {};
  in.read(reinterpret_cast<char*>(head), sizeof(head));
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | head[i];
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (!in || n < 2 || n > size - 8 || head[8] != '{') {
    out->push_back(absl::StrCat(
        "checkpoint.init_from_safetensors: \"", Shown(path),
        "\" is not a safetensors file (it does not start with a header length and a JSON "
        "header)"));
  }
}

// checkpoint.init_from_dcp: a DCP directory holds its .metadata file, or the job would fail only
// once its trainers start.
void CheckDcpDir(const std::string& path, std::vector<std::string>* out) {
  struct stat st;
  if (path.empty() || stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return;  // reported
  if (stat((path + "/.metadata").c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
    out->push_back(
        absl::StrCat("checkpoint.init_from_dcp: \"", Shown(path),
                     "\" holds no .metadata file (not a torch.distributed.checkpoint directory)"));
  }
}

// checkpoint.resume_from: a committed step directory (step_<N> with its MANIFEST.json) or a
// directory holding one, or the job would fail only once its trainers start.
void CheckResumeFrom(const std::string& path, std::vector<std::string>* out) {
  struct stat st;
  if (path.empty() || stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return;  // reported
  std::string dir = path;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  const std::string base = dir.substr(dir.find_last_of('/') + 1);
  auto is_step = [](const std::string& name) {
    return name.size() > 5 && absl::StartsWith(name, "step_") &&
           std::all_of(name.begin() + 5, name.end(),
                       [](char c) { return absl::ascii_isdigit(static_cast<unsigned char>(c)); });
  };
  auto committed = [](const std::string& step_dir) {
    return access((step_dir + "/MANIFEST.json").c_str(), R_OK) == 0;
  };
  if (is_step(base)) {
    if (!committed(dir)) {
      out->push_back(absl::StrCat("checkpoint.resume_from: \"", Shown(path),
                                  "\" is not a committed checkpoint (no MANIFEST.json in it)"));
    }
    return;
  }
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (is_step(name) && committed(entry.path().string())) return;
  }
  out->push_back(absl::StrCat("checkpoint.resume_from: \"", Shown(path),
                              "\" holds no committed checkpoint (no step_<N>/MANIFEST.json)"));
}

}  // namespace

std::vector<std::string> CheckpointSourceProblems(const CheckpointSpec& c) {
  std::vector<std::string> out;
  CheckSafetensorsHeader(c.init_from_safetensors(), &out);
  CheckResumeFrom(c.resume_from(), &out);
  CheckDcpDir(c.init_from_dcp(), &out);
  return out;
}

}  // namespace shardline::spec
