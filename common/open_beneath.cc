#include "common/open_beneath.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"

namespace shardline {
namespace {

// Never destroyed: a reader on another thread may still open files at exit.
absl::Mutex& RootsMu() {
  static absl::Mutex* mu = new absl::Mutex;
  return *mu;
}
std::vector<std::string>& Roots() ABSL_EXCLUSIVE_LOCKS_REQUIRED(RootsMu()) {
  static auto* roots = new std::vector<std::string>;
  return *roots;
}

absl::Status OpenError(absl::string_view what, const std::string& path, int err) {
  const std::string msg = absl::StrCat(what, " \"", path, "\": ", std::strerror(err));
  return err == ENOENT ? absl::NotFoundError(msg) : absl::PermissionDeniedError(msg);
}

// The file must be a regular file: a FIFO or a device would block or never end a read.
absl::StatusOr<int> KeepIfRegular(int fd, absl::string_view what, const std::string& path) {
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    close(fd);
    return OpenError(what, path, err);
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return absl::FailedPreconditionError(
        absl::StrCat(what, " \"", path, "\" is not a regular file (",
                     S_ISDIR(st.st_mode) ? "a folder" : "a FIFO, device or socket", ")"));
  }
  // O_NONBLOCK kept a FIFO from blocking the open; reads of a regular file ignore it, but clear
  // it so the descriptor behaves as a plain open's.
  const int flags = fcntl(fd, F_GETFL);
  if (flags >= 0) (void)fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return fd;
}

// openat2 of `path` from `root`'s directory, resolving beneath it: a descriptor, or -errno.
int OpenAt2Beneath(const std::string& root, const std::string& path) {
  const int root_fd = open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (root_fd < 0) return -errno;
  std::string rest = path.substr(root.size());
  while (absl::StartsWith(rest, "/")) rest.erase(0, 1);
  if (rest.empty()) rest = ".";
  struct open_how how;
  std::memset(&how, 0, sizeof(how));
  how.flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  const int fd = static_cast<int>(syscall(SYS_openat2, root_fd, rest.c_str(), &how, sizeof(how)));
  const int err = errno;
  close(root_fd);
  return fd >= 0 ? fd : -err;
}

// The roots as the kernel sees them (a root may itself be a link: /data -> /mnt/disk1/data).
std::vector<std::string> ResolvedRoots(const std::vector<std::string>& roots) {
  std::vector<std::string> out;
  for (const std::string& r : roots) {
    char buf[PATH_MAX];
    if (realpath(r.c_str(), buf) != nullptr) out.emplace_back(buf);
  }
  return out;
}

absl::Status Outside(absl::string_view what, const std::string& path, absl::string_view resolved,
                     const std::vector<std::string>& roots) {
  return absl::PermissionDeniedError(absl::StrCat(
      what, " \"", path, "\" resolves ", resolved.empty() ? "" : absl::StrCat("to ", resolved, " "),
      "outside the roots [", absl::StrJoin(roots, ", "),
      "] (a symbolic link or \"..\" leaves them); refused at the open"));
}

// RESOLVE_BENEATH refuses every absolute link, even one to another file under the root
// (/data/current -> /data/v3), and, without openat2 (kernels before 5.6), any link. Then the
// path is resolved (realpath), checked against the resolved roots, and the resolved path, which
// has no link left, opened beneath its root: should a component be swapped for a link in between,
// that open fails rather than follow it (without openat2: O_NOFOLLOW guards the last component
// only, the window is not closed there).
absl::StatusOr<int> OpenResolved(const std::string& path, absl::string_view what,
                                 const std::vector<std::string>& roots) {
  char buf[PATH_MAX];
  if (realpath(path.c_str(), buf) == nullptr) return OpenError(what, path, errno);
  const std::string resolved(buf);
  const std::string root = LongestRootHolding(resolved, ResolvedRoots(roots));
  if (root.empty()) return Outside(what, path, resolved, roots);
  int fd = OpenAt2Beneath(root, resolved);
  if (fd == -ENOSYS) {
    fd = open(resolved.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) fd = -errno;
  }
  if (fd == -EXDEV || fd == -ELOOP) return Outside(what, path, "", roots);
  if (fd < 0) return OpenError(what, path, -fd);
  return KeepIfRegular(fd, what, path);
}

}  // namespace

bool PathIsUnder(absl::string_view path, absl::string_view root) {
  if (root == "/") return absl::StartsWith(path, "/");
  return path == root ||
         (absl::StartsWith(path, root) && path.size() > root.size() && path[root.size()] == '/');
}

std::string LongestRootHolding(absl::string_view path, const std::vector<std::string>& roots) {
  std::string best;
  for (const std::string& r : roots) {
    if (PathIsUnder(path, r) && r.size() > best.size()) best = r;
  }
  return best;
}

void SetOpenRoots(std::vector<std::string> roots) {
  absl::MutexLock lock(&RootsMu());
  Roots() = std::move(roots);
}

std::vector<std::string> OpenRoots() {
  absl::MutexLock lock(&RootsMu());
  return Roots();
}

absl::StatusOr<int> OpenForRead(const std::string& path, absl::string_view what) {
  const std::vector<std::string> roots = OpenRoots();
  if (roots.empty()) {
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return OpenError(what, path, errno);
    return KeepIfRegular(fd, what, path);
  }
  const std::string root = LongestRootHolding(path, roots);
  if (root.empty()) {
    return absl::PermissionDeniedError(absl::StrCat(what, " \"", path, "\" is outside the roots [",
                                                    absl::StrJoin(roots, ", "), "]"));
  }
  const int fd = OpenAt2Beneath(root, path);
  if (fd >= 0) return KeepIfRegular(fd, what, path);
  if (fd == -ENOSYS || fd == -EXDEV || fd == -ELOOP) return OpenResolved(path, what, roots);
  return OpenError(what, path, -fd);
}

absl::StatusOr<std::string> ReadFileBeneath(const std::string& path, absl::string_view what) {
  absl::StatusOr<int> fd = OpenForRead(path, what);
  if (!fd.ok()) return fd.status();
  std::string out;
  char buf[1 << 16];
  while (true) {
    const ssize_t n = read(*fd, buf, sizeof(buf));
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      close(*fd);
      return OpenError(what, path, err);
    }
    out.append(buf, static_cast<size_t>(n));
  }
  close(*fd);
  return out;
}

}  // namespace shardline
