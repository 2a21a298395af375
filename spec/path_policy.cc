#include "spec/path_policy.h"

#include <limits.h>
#include <stdlib.h>

#include <sys/stat.h>

#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/open_beneath.h"

namespace shardline::spec {
namespace {

bool InsideAny(const std::string& path, const std::vector<std::string>& roots) {
  for (const std::string& r : roots) {
    if (PathIsUnder(path, r)) return true;
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

// Whether `path` has a ".." component. The kernel applies ".." to where the link before it
// points (with R/lnk -> /, R/lnk/../etc is /etc), a lexical check to the text (R/etc): the two
// disagree whenever a link precedes it, so a restricted path may not have one at all.
bool HasDotDot(absl::string_view path) {
  for (absl::string_view part : absl::StrSplit(path, '/')) {
    if (part == "..") return true;
  }
  return false;
}

// What is at a path on disk; `follow`: through a final link (stat), else the link itself.
enum class Kind { kMissing, kRegular, kDirectory, kLink, kOther };
enum class Follow { kNo, kYes };
Kind KindAt(const std::string& path, Follow follow) {
  struct stat st;
  const int rc = follow == Follow::kYes ? ::stat(path.c_str(), &st) : ::lstat(path.c_str(), &st);
  if (rc != 0) return Kind::kMissing;
  if (S_ISLNK(st.st_mode)) return Kind::kLink;
  if (S_ISREG(st.st_mode)) return Kind::kRegular;
  if (S_ISDIR(st.st_mode)) return Kind::kDirectory;
  return Kind::kOther;
}

// A folder the trainer reads or writes in (an HF folder, a checkpoint directory): each entry
// below it is opened by name, so each must stay under the roots too. Links are checked where
// they point (a dangling one is refused: a write through it would create its target); devices,
// FIFOs and sockets are refused (a read of /dev/zero never ends). Walks at most kMaxFolderEntries
// entries: a folder larger than that is refused rather than half checked.
constexpr size_t kMaxFolderEntries = 100000;
void CheckFolderEntries(const SpecPath& p, const std::string& folder,
                        const std::vector<std::string>& resolved_roots, const std::string& allowed,
                        std::vector<std::string>* problems) {
  std::error_code ec;
  std::filesystem::recursive_directory_iterator it(folder, std::filesystem::directory_options::none,
                                                   ec);
  size_t seen = 0;
  for (; !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (++seen > kMaxFolderEntries) {
      problems->push_back(absl::StrCat(p.field, ": ", p.path, " holds more than ",
                                       kMaxFolderEntries, " entries; refused unchecked"));
      return;
    }
    const std::string entry = it->path().string();
    const Kind kind = KindAt(entry, Follow::kNo);
    if (kind == Kind::kLink) {
      char buf[PATH_MAX];
      if (::realpath(entry.c_str(), buf) == nullptr) {
        problems->push_back(absl::StrCat(p.field, ": ", entry,
                                         " is a symbolic link to nothing (refused: a write "
                                         "through it would create its target)"));
        continue;
      }
      const std::string target = NormalizePath(buf);
      if (!InsideAny(target, resolved_roots)) {
        problems->push_back(absl::StrCat(p.field, ": ", entry, " is a symbolic link to ", target,
                                         ", which is outside ", allowed));
      } else if (KindAt(entry, Follow::kYes) == Kind::kOther) {
        problems->push_back(absl::StrCat(p.field, ": ", entry, " links to ", target,
                                         ", which is not a regular file or folder"));
      }
    } else if (kind == Kind::kOther) {
      problems->push_back(absl::StrCat(p.field, ": ", entry,
                                       " is not a regular file or folder (a device, FIFO or "
                                       "socket)"));
    }
  }
}

// The worker's check of one path that passed the lexical one: links resolved against the roots,
// the kind of file, and for folders every entry below.
void CheckOnDisk(const SpecPath& p, const std::vector<std::string>& roots,
                 const std::string& allowed, absl::string_view job_id,
                 std::vector<std::string>* problems) {
  // A root may itself be a link (/data -> /mnt/disk1/data): compare resolved with resolved.
  std::vector<std::string> resolved_roots = roots;
  for (const std::string& r : roots) resolved_roots.push_back(ResolveExistingPrefix(r));
  const std::string normal = NormalizePath(p.path);
  const std::string resolved = ResolveExistingPrefix(normal);
  if (!InsideAny(resolved, resolved_roots)) {
    problems->push_back(absl::StrCat(p.field, ": ", p.path, " resolves to ", resolved,
                                     " (a symbolic link), which is outside ", allowed));
    return;
  }
  const Kind kind = KindAt(normal, Follow::kYes);
  switch (p.access) {
    case SpecPath::Access::kRead:
      // A missing file is spec validation's to name; anything but a regular file is refused.
      if (kind == Kind::kDirectory || kind == Kind::kOther) {
        problems->push_back(
            absl::StrCat(p.field, ": ", p.path, " is not a regular file",
                         kind == Kind::kDirectory ? " (a folder)" : " (a device, FIFO or socket)"));
      }
      return;
    case SpecPath::Access::kReadDir:
    case SpecPath::Access::kCheckpointRead:
      if (kind == Kind::kDirectory) {
        CheckFolderEntries(p, normal, resolved_roots, allowed, problems);
      }
      return;
    case SpecPath::Access::kCheckpoint: {
      if (kind == Kind::kOther || kind == Kind::kRegular) {
        problems->push_back(absl::StrCat(p.field, ": ", p.path, " is not a folder"));
        return;
      }
      // The job writes and deletes in <dir>/<job id>: that folder, not every job's, is walked.
      const std::string own = job_id.empty() ? normal : absl::StrCat(normal, "/", job_id);
      if (!job_id.empty()) {
        const std::string own_resolved = ResolveExistingPrefix(own);
        if (!InsideAny(own_resolved, resolved_roots)) {
          problems->push_back(absl::StrCat(p.field, ": ", own, " resolves to ", own_resolved,
                                           " (a symbolic link), which is outside ", allowed));
          return;
        }
      }
      if (KindAt(own, Follow::kYes) == Kind::kDirectory) {
        CheckFolderEntries(p, own, resolved_roots, allowed, problems);
      }
      return;
    }
  }
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
  add("checkpoint.init_from_dcp", spec.checkpoint().init_from_dcp(), SpecPath::Access::kReadDir);
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

absl::Status CheckSpecPaths(const JobSpec& spec, const PathPolicy& policy, bool resolve_links,
                            absl::string_view job_id) {
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
    if (HasDotDot(p.path)) {
      problems.push_back(absl::StrCat(
          p.field, ": ", p.path, " has a \"..\" component, which is refused under ", allowed,
          ": after a symbolic link \"..\" leaves the folder the text names; write the path "
          "without it"));
      continue;
    }
    if (!InsideAny(NormalizePath(p.path), roots)) {
      problems.push_back(absl::StrCat(p.field, ": ", p.path, " is outside ", allowed));
      continue;
    }
    if (resolve_links) CheckOnDisk(p, roots, allowed, job_id, &problems);
  }
  if (problems.empty()) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrJoin(problems, "\n"));
}

}  // namespace shardline::spec
