#include "spec/path_policy.h"

#include <limits.h>
#include <stdlib.h>

#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace shardline::spec {
namespace {

bool Inside(const std::string& path, const std::string& root) {
  if (root == "/") return true;
  return path == root || (path.size() > root.size() && path.compare(0, root.size(), root) == 0 &&
                          path[root.size()] == '/');
}

bool InsideAny(const std::string& path, const std::vector<std::string>& roots) {
  for (const std::string& r : roots) {
    if (Inside(path, r)) return true;
  }
  return false;
}

// `path` with the symbolic links of its longest existing prefix resolved (realpath), the rest
// appended: a checkpoint directory need not exist yet, its parent decides where it lands.
std::string ResolveExistingPrefix(const std::string& path) {
  std::filesystem::path p(path);
  std::filesystem::path rest;
  while (!p.empty()) {
    char buf[PATH_MAX];
    if (::realpath(p.c_str(), buf) != nullptr) {
      std::filesystem::path resolved(buf);
      if (!rest.empty()) resolved /= rest;
      return NormalizePath(resolved.string());
    }
    if (p == p.root_path()) break;
    rest = rest.empty() ? p.filename() : p.filename() / rest;
    p = p.parent_path();
  }
  return NormalizePath(path);
}

}  // namespace

std::vector<SpecPath> SpecPaths(const JobSpec& spec) {
  std::vector<SpecPath> paths;
  auto add = [&](const char* field, const std::string& path, SpecPath::Access access) {
    if (!path.empty()) paths.push_back({field, path, access});
  };
  add("data.path", spec.data().path(), SpecPath::Access::kRead);
  for (int i = 0; i < spec.data().paths_size(); ++i) {
    // An empty entry is listed too, so validation names it.
    paths.push_back(
        {absl::StrCat("data.paths[", i, "]"), spec.data().paths(i), SpecPath::Access::kRead});
  }
  add("data.val_path", spec.data().val_path(), SpecPath::Access::kRead);
  add("data.vocab_path", spec.data().vocab_path(), SpecPath::Access::kRead);
  add("model.torchscript_path", spec.model().torchscript_path(), SpecPath::Access::kRead);
  add("model.hf_dir", spec.model().hf_dir(), SpecPath::Access::kReadDir);
  add("checkpoint.init_from_safetensors", spec.checkpoint().init_from_safetensors(),
      SpecPath::Access::kRead);
  add("checkpoint.resume_from", spec.checkpoint().resume_from(), SpecPath::Access::kCheckpointRead);
  add("checkpoint.dir", spec.checkpoint().dir(), SpecPath::Access::kCheckpoint);
  // Written like checkpoints: the same roots bound it.
  add("train.tensorboard_dir", spec.train().tensorboard_dir(), SpecPath::Access::kCheckpoint);
  return paths;
}

std::string NormalizePath(absl::string_view path) {
  const bool absolute = absl::StartsWith(path, "/");
  std::vector<std::string> parts;
  for (absl::string_view part : absl::StrSplit(path, '/', absl::SkipEmpty())) {
    if (part == ".") continue;
    if (part == "..") {
      if (!parts.empty() && parts.back() != "..") {
        parts.pop_back();
      } else if (!absolute) {
        parts.push_back("..");
      }
      continue;
    }
    parts.emplace_back(part);
  }
  const std::string joined = absl::StrJoin(parts, "/");
  if (absolute) return absl::StrCat("/", joined);
  return joined.empty() ? "." : joined;
}

absl::StatusOr<std::vector<std::string>> ParseRoots(absl::string_view flag, absl::string_view csv) {
  std::vector<std::string> roots;
  for (absl::string_view r : absl::StrSplit(csv, ',', absl::SkipWhitespace())) {
    r = absl::StripAsciiWhitespace(r);
    if (!absl::StartsWith(r, "/")) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, ": root \"", r, "\" must be an absolute path"));
    }
    std::string root = NormalizePath(r);
    if (root == "/") {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", flag, ": root \"", r, "\" allows every path; leave --", flag, " empty instead"));
    }
    roots.push_back(std::move(root));
  }
  return roots;
}

absl::Status CheckSpecPaths(const JobSpec& spec, const PathPolicy& policy, bool resolve_links) {
  std::vector<std::string> problems;
  for (const SpecPath& p : SpecPaths(spec)) {
    const bool read = p.access == SpecPath::Access::kRead || p.access == SpecPath::Access::kReadDir;
    const std::vector<std::string>& roots = read ? policy.read_roots : policy.checkpoint_roots;
    if (roots.empty()) continue;
    const char* flag = read ? "read_roots" : "checkpoint_roots";
    const std::string allowed = absl::StrCat(read ? "the read roots [" : "the checkpoint roots [",
                                             absl::StrJoin(roots, ", "), "] allowed by the ",
                                             policy.owner, " (--", flag, ")");
    if (!absl::StartsWith(p.path, "/")) {
      problems.push_back(
          absl::StrCat(p.field, ": \"", p.path, "\" must be an absolute path under ", allowed));
      continue;
    }
    const std::string normal = NormalizePath(p.path);
    if (!InsideAny(normal, roots)) {
      problems.push_back(absl::StrCat(p.field, ": ", p.path, " is outside ", allowed));
      continue;
    }
    if (resolve_links) {
      // A root may itself be a link (/data -> /mnt/disk1/data): compare resolved with resolved.
      std::vector<std::string> resolved_roots = roots;
      for (const std::string& r : roots) resolved_roots.push_back(ResolveExistingPrefix(r));
      const std::string resolved = ResolveExistingPrefix(normal);
      if (!InsideAny(resolved, resolved_roots)) {
        problems.push_back(absl::StrCat(p.field, ": ", p.path, " resolves to ", resolved,
                                        " (a symbolic link), which is outside ", allowed));
      }
    }
  }
  if (problems.empty()) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrJoin(problems, "\n"));
}

}  // namespace shardline::spec
