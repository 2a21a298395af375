#include "checkpoint/durable_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "common/write_beneath.h"

namespace shardline::checkpoint {
namespace {

absl::Status Errno(absl::string_view what, const std::string& path) {
  return absl::InternalError(absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

absl::Mutex hook_mu(absl::kConstInit);
FsyncDirHook* hook ABSL_GUARDED_BY(hook_mu) = nullptr;

}  // namespace

std::string ParentDir(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const size_t slash = p.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return p.substr(0, slash);
}

FsyncDirHook SetFsyncDirHookForTesting(FsyncDirHook h) {
  absl::MutexLock lock(&hook_mu);
  FsyncDirHook old = hook != nullptr ? std::move(*hook) : FsyncDirHook();
  delete hook;
  hook = h ? new FsyncDirHook(std::move(h)) : nullptr;
  return old;
}

absl::Status FsyncDir(const std::string& dir) {
  absl::StatusOr<int> opened = OpenDirBeneath(dir);
  if (!opened.ok()) return opened.status();
  const int fd = *opened;
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) {
    errno = err;
    return Errno("fsync directory", dir);
  }
  absl::MutexLock lock(&hook_mu);
  if (hook != nullptr) (*hook)(dir);
  return absl::OkStatus();
}

absl::Status MakeDirsDurable(const std::string& dir) {
  // The components to create, outermost first.
  std::vector<std::string> missing;
  for (std::string d = dir; !d.empty() && d != "/" && d != ".";) {
    struct stat st;
    if (::stat(d.c_str(), &st) == 0) {
      if (!S_ISDIR(st.st_mode)) {
        return absl::InternalError(
            absl::StrCat("create directory ", dir, ": ", d, " is not a directory"));
      }
      break;
    }
    missing.push_back(d);
    d = ParentDir(d);
  }
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    // Another writer may create it at the same time (shard writers of one step): not an error,
    // and the parent is synced all the same, since that writer may not have got there yet.
    if (absl::Status made = MakeDirBeneath(*it, 0755); !made.ok()) return made;
    absl::Status s = FsyncDir(ParentDir(*it));
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status RenameDurable(const std::string& from, const std::string& to) {
  if (absl::Status renamed = RenameBeneath(from, to); !renamed.ok()) return renamed;
  const std::string to_dir = ParentDir(to);
  absl::Status s = FsyncDir(to_dir);
  if (!s.ok()) return s;
  const std::string from_dir = ParentDir(from);
  if (from_dir != to_dir) return FsyncDir(from_dir);
  return absl::OkStatus();
}

absl::Status WriteFileAtomic(const std::string& path, absl::string_view data) {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  const std::string tmp = absl::StrFormat("%s.tmp.%016x", path, rng());
  absl::StatusOr<int> opened = OpenForWrite(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (!opened.ok()) return opened.status();
  const int fd = *opened;
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      absl::Status s = Errno("write", tmp);
      ::close(fd);
      (void)UnlinkBeneath(tmp);
      return s;
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    absl::Status s = Errno("fsync", tmp);
    ::close(fd);
    (void)UnlinkBeneath(tmp);
    return s;
  }
  ::close(fd);
  absl::Status s = RenameDurable(tmp, path);
  if (!s.ok()) (void)UnlinkBeneath(tmp);
  return s;
}

}  // namespace shardline::checkpoint
