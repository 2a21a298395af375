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
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Errno("open directory", dir);
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
    if (::mkdir(it->c_str(), 0755) != 0 && errno != EEXIST) {
      return Errno("create directory", *it);
    }
    absl::Status s = FsyncDir(ParentDir(*it));
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status RenameDurable(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    return absl::InternalError(
        absl::StrCat("rename ", from, " to ", to, ": ", std::strerror(errno)));
  }
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
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("create", tmp);
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      absl::Status s = Errno("write", tmp);
      ::close(fd);
      ::unlink(tmp.c_str());
      return s;
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    absl::Status s = Errno("fsync", tmp);
    ::close(fd);
    ::unlink(tmp.c_str());
    return s;
  }
  ::close(fd);
  absl::Status s = RenameDurable(tmp, path);
  if (!s.ok()) ::unlink(tmp.c_str());
  return s;
}

}  // namespace shardline::checkpoint
