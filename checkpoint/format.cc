#include "checkpoint/format.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "common/write_beneath.h"

namespace shardline::checkpoint {
namespace {

absl::Status Errno(absl::string_view what, const std::string& path) {
  return absl::InternalError(absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

bool FileExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

}  // namespace

std::string StepDirName(int64_t step) { return absl::StrCat("step_", step); }
std::string StepDir(const std::string& root, int64_t step) {
  return absl::StrCat(root, "/", StepDirName(step));
}
std::string DataFileName(int shard_index) { return absl::StrFormat("shard_%05d.bin", shard_index); }
std::string ShardIndexFileName(int shard_index) {
  return absl::StrFormat("shard_%05d.index.json", shard_index);
}

bool ParseStepDirName(absl::string_view name, int64_t* step) {
  if (!absl::ConsumePrefix(&name, "step_") || name.empty()) return false;
  for (char c : name) {
    if (c < '0' || c > '9') return false;
  }
  return absl::SimpleAtoi(name, step);
}

namespace {

// Every step directory under root: (step, committed).
absl::StatusOr<std::vector<std::pair<int64_t, bool>>> ListStepDirs(const std::string& root) {
  std::vector<std::pair<int64_t, bool>> out;
  DIR* d = ::opendir(root.c_str());
  if (d == nullptr) {
    if (errno == ENOENT) return out;
    return Errno("open directory", root);
  }
  while (struct dirent* e = ::readdir(d)) {
    int64_t step;
    if (!ParseStepDirName(e->d_name, &step)) continue;
    const std::string manifest = absl::StrCat(root, "/", e->d_name, "/", kManifestFile);
    out.emplace_back(step, FileExists(manifest));
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

absl::StatusOr<std::vector<int64_t>> ListCommittedSteps(const std::string& root) {
  auto dirs = ListStepDirs(root);
  if (!dirs.ok()) return dirs.status();
  std::vector<int64_t> out;
  for (const auto& [step, committed] : *dirs) {
    if (committed) out.push_back(step);
  }
  return out;
}

absl::StatusOr<int64_t> ResolveStep(const std::string& root, int64_t step) {
  auto steps = ListCommittedSteps(root);
  if (!steps.ok()) return steps.status();
  if (step < 0) {
    if (steps->empty()) {
      return absl::NotFoundError(absl::StrCat("no committed checkpoint under ", root));
    }
    return steps->back();
  }
  if (std::find(steps->begin(), steps->end(), step) == steps->end()) {
    return absl::NotFoundError(
        absl::StrCat("no committed checkpoint ", StepDir(root, step), " (no ", kManifestFile, ")"));
  }
  return step;
}

absl::StatusOr<std::vector<int64_t>> ApplyRetention(const std::string& root, int keep_last,
                                                    int64_t up_to) {
  auto dirs = ListStepDirs(root);
  if (!dirs.ok()) return dirs.status();
  std::vector<int64_t> committed;
  for (const auto& [step, c] : *dirs) {
    if (c && step <= up_to) committed.push_back(step);
  }
  std::vector<int64_t> deleted;
  if (committed.empty()) return deleted;
  const int64_t newest = committed.back();
  const size_t keep = keep_last <= 0 ? committed.size() : static_cast<size_t>(keep_last);
  std::vector<int64_t> doomed;
  if (committed.size() > keep) {
    doomed.assign(committed.begin(), committed.end() - keep);
  }
  for (const auto& [step, c] : *dirs) {
    if (!c && step < newest) doomed.push_back(step);  // Interrupted save, superseded.
  }
  for (int64_t step : doomed) {
    if (step == newest) continue;  // Never (defensive: keep >= 1 already guarantees it).
    const std::string dir = StepDir(root, step);
    // Manifest first: a crash half-way leaves an uncommitted directory, never a broken
    // committed one.
    const std::string manifest = absl::StrCat(dir, "/", kManifestFile);
    if (absl::Status s = UnlinkBeneath(manifest); !s.ok() && !absl::IsNotFound(s)) return s;
    // Links inside the step directory are removed, never followed (common/write_beneath.h).
    if (absl::Status s = RemoveTreeBeneath(dir); !s.ok()) return s;
    deleted.push_back(step);
  }
  if (!deleted.empty()) {
    absl::Status s = FsyncDir(root);
    if (!s.ok()) return s;
  }
  std::sort(deleted.begin(), deleted.end());
  return deleted;
}

std::string ModelFingerprint(std::vector<TensorInfo> params) {
  std::sort(params.begin(), params.end(),
            [](const TensorInfo& a, const TensorInfo& b) { return a.name < b.name; });
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](absl::string_view s) {
    for (unsigned char c : s) {
      h ^= c;
      h *= 1099511628211ull;
    }
  };
  int64_t total = 0;
  for (const TensorInfo& t : params) {
    mix(t.name);
    mix(":");
    int64_t n = 1;
    for (int64_t d : t.shape) {
      mix(absl::StrCat(d, ","));
      n *= d;
    }
    mix(t.dtype);
    mix(";");
    total += n;
  }
  return absl::StrFormat("fnv1a64:%016x:%d:%d", h, params.size(), total);
}

bool SplitStateName(const std::string& name, std::string* param, std::string* state) {
  const size_t pos = name.rfind('#');
  if (pos == std::string::npos) return false;
  *param = name.substr(0, pos);
  *state = name.substr(pos + 1);
  return true;
}

}  // namespace shardline::checkpoint
