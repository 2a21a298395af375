#include "common/write_beneath.h"

#include <dirent.h>
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
#include "common/open_beneath.h"

namespace shardline {
namespace {

// Never destroyed: a writer on another thread may still write at exit.
absl::Mutex& RootsMu() {
  static absl::Mutex* mu = new absl::Mutex;
  return *mu;
}
std::vector<std::string>& Roots() ABSL_EXCLUSIVE_LOCKS_REQUIRED(RootsMu()) {
  static auto* roots = new std::vector<std::string>;
  return *roots;
}

absl::Status Errno(absl::string_view op, const std::string& path, int err) {
  return absl::InternalError(absl::StrCat(op, " ", path, ": ", std::strerror(err)));
}

absl::Status Outside(const std::string& path, const std::string& root) {
  return absl::PermissionDeniedError(
      absl::StrCat("checkpoint path \"", path, "\" resolves outside the root ", root,
                   " (a symbolic link or \"..\" leaves it); refused at the write"));
}

// A folder's descriptor and the last component of a path, for the *at calls.
class Parent {
 public:
  Parent() = default;
  Parent(const Parent&) = delete;
  Parent& operator=(const Parent&) = delete;
  ~Parent() {
    if (fd_ >= 0) close(fd_);
  }
  int fd() const { return fd_; }
  const std::string& leaf() const { return leaf_; }

  // Whether the path was a root itself (Resolve then refuses: no entry of its folder may be
  // touched; OpenDirBeneath and MakeDirBeneath accept it).
  bool is_root() const { return is_root_; }
  // No roots: the callers make the plain call on the whole path (the behaviour without a
  // policy, relative names and "." included).
  bool plain() const { return plain_; }
  // The errno of a failed Resolve's open of the folder (0: none).
  int error() const { return error_; }

  // `path`'s folder, resolved beneath its root (or, with no roots, the plain path).
  absl::Status Resolve(std::string path) {
    const std::vector<std::string> roots = WriteRoots();
    plain_ = roots.empty();
    if (plain_) return absl::OkStatus();
    while (path.size() > 1 && path.back() == '/') path.pop_back();
    const size_t slash = path.rfind('/');
    leaf_ = slash == std::string::npos ? path : path.substr(slash + 1);
    if (leaf_.empty() || leaf_ == "." || leaf_ == "..") {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint path \"", path, "\" does not end in a file or folder name"));
    }
    const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
    const std::string root = LongestRootHolding(path, roots);
    is_root_ = !root.empty() && path == root;
    if (root.empty() || is_root_) {
      return absl::PermissionDeniedError(
          absl::StrCat("checkpoint path \"", path, "\" is outside the roots [",
                       absl::StrJoin(roots, ", "), "] (--checkpoint_roots)"));
    }
    const int root_fd = open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (root_fd < 0) return Errno("open root", root, errno);
    std::string rel = dir.substr(std::min(dir.size(), root.size()));
    while (absl::StartsWith(rel, "/")) rel.erase(0, 1);
    if (rel.empty()) rel = ".";
    struct open_how how;
    std::memset(&how, 0, sizeof(how));
    how.flags = O_PATH | O_DIRECTORY | O_CLOEXEC;
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
    fd_ = static_cast<int>(syscall(SYS_openat2, root_fd, rel.c_str(), &how, sizeof(how)));
    const int err = errno;
    if (fd_ < 0 && err == ENOSYS) return ResolveWithoutOpenat2(dir, root, root_fd);
    close(root_fd);
    if (fd_ >= 0) return absl::OkStatus();
    error_ = err;
    if (err == EXDEV || err == ELOOP) return Outside(path, root);
    return Errno("open directory", dir, err);
  }

 private:
  // Kernels before 5.6: the folder's real path must lie under the root's; the window between
  // the check and the call is not closed there (the last component is still never followed).
  absl::Status ResolveWithoutOpenat2(const std::string& dir, const std::string& root, int root_fd) {
    close(root_fd);
    char real_dir[PATH_MAX];
    char real_root[PATH_MAX];
    if (realpath(dir.c_str(), real_dir) == nullptr) return Errno("resolve folder", dir, errno);
    if (realpath(root.c_str(), real_root) == nullptr) return Errno("resolve root", root, errno);
    if (!PathIsUnder(real_dir, real_root)) return Outside(dir, root);
    fd_ = open(real_dir, O_PATH | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    return fd_ >= 0 ? absl::OkStatus() : Errno("open directory", real_dir, errno);
  }

  int fd_ = -1;
  std::string leaf_;
  bool is_root_ = false;
  bool plain_ = false;
  int error_ = 0;
};

// Everything inside the folder `dir_fd` (which it closes), links removed, never followed.
absl::Status RemoveContents(int dir_fd, const std::string& path) {
  DIR* d = fdopendir(dir_fd);
  if (d == nullptr) {
    const int err = errno;
    close(dir_fd);
    return Errno("list", path, err);
  }
  absl::Status status;
  while (struct dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    const std::string child = absl::StrCat(path, "/", name);
    struct stat st;
    if (fstatat(dirfd(d), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      status = Errno("stat", child, errno);
      break;
    }
    if (S_ISDIR(st.st_mode)) {
      const int sub =
          openat(dirfd(d), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub < 0) {
        status = Errno("open directory", child, errno);
        break;
      }
      status = RemoveContents(sub, child);
      if (!status.ok()) break;
    }
    if (unlinkat(dirfd(d), name.c_str(), S_ISDIR(st.st_mode) ? AT_REMOVEDIR : 0) != 0) {
      status = Errno("remove", child, errno);
      break;
    }
  }
  closedir(d);
  return status;
}

}  // namespace

void SetWriteRoots(std::vector<std::string> roots) {
  absl::MutexLock lock(&RootsMu());
  Roots() = std::move(roots);
}

std::vector<std::string> WriteRoots() {
  absl::MutexLock lock(&RootsMu());
  return Roots();
}

absl::StatusOr<int> OpenForWrite(const std::string& path, int flags, mode_t mode) {
  Parent p;
  if (absl::Status s = p.Resolve(path); !s.ok()) return s;
  if (p.plain()) {
    const int fd = open(path.c_str(), flags | O_CLOEXEC, mode);
    return fd >= 0 ? absl::StatusOr<int>(fd) : Errno("open", path, errno);
  }
  const int fd = openat(p.fd(), p.leaf().c_str(), flags | O_CLOEXEC | O_NOFOLLOW, mode);
  if (fd >= 0) return fd;
  if (errno == ELOOP) {
    return absl::PermissionDeniedError(
        absl::StrCat("checkpoint path \"", path, "\" is a symbolic link; refused at the write"));
  }
  return Errno("open", path, errno);
}

absl::StatusOr<int> OpenDirBeneath(const std::string& dir) {
  Parent p;
  if (absl::Status s = p.Resolve(dir); !s.ok()) {
    if (!p.is_root()) return s;
    const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);  // a root: trusted
    return fd >= 0 ? absl::StatusOr<int>(fd) : Errno("open directory", dir, errno);
  }
  if (p.plain()) {
    const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    return fd >= 0 ? absl::StatusOr<int>(fd) : Errno("open directory", dir, errno);
  }
  const int fd = openat(p.fd(), p.leaf().c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd >= 0) return fd;
  if (errno == ELOOP || errno == ENOTDIR) {
    return absl::PermissionDeniedError(absl::StrCat(
        "checkpoint folder \"", dir, "\" is not a folder (a symbolic link?); refused"));
  }
  return Errno("open directory", dir, errno);
}

absl::Status MakeDirBeneath(const std::string& dir, mode_t mode) {
  Parent p;
  if (absl::Status s = p.Resolve(dir); !s.ok()) {
    struct stat st;
    if (p.is_root() && stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      return absl::OkStatus();  // the root exists: nothing to make
    }
    return s;
  }
  const int rc = p.plain() ? mkdir(dir.c_str(), mode) : mkdirat(p.fd(), p.leaf().c_str(), mode);
  if (rc == 0 || errno == EEXIST) return absl::OkStatus();
  return Errno("create folder", dir, errno);
}

absl::Status RenameBeneath(const std::string& from, const std::string& to) {
  Parent f;
  Parent t;
  if (absl::Status s = f.Resolve(from); !s.ok()) return s;
  if (absl::Status s = t.Resolve(to); !s.ok()) return s;
  const int rc = f.plain() ? rename(from.c_str(), to.c_str())
                           : renameat(f.fd(), f.leaf().c_str(), t.fd(), t.leaf().c_str());
  if (rc == 0) return absl::OkStatus();
  return Errno(absl::StrCat("rename ", from, " to"), to, errno);
}

absl::Status UnlinkBeneath(const std::string& path) {
  Parent p;
  if (absl::Status s = p.Resolve(path); !s.ok()) {
    if (p.error() != ENOENT) return s;
    return absl::NotFoundError(absl::StrCat("remove ", path, ": ", std::strerror(ENOENT)));
  }
  const int rc = p.plain() ? unlink(path.c_str()) : unlinkat(p.fd(), p.leaf().c_str(), 0);
  if (rc == 0) return absl::OkStatus();
  if (errno == ENOENT) {
    return absl::NotFoundError(absl::StrCat("remove ", path, ": ", std::strerror(errno)));
  }
  return Errno("remove", path, errno);
}

absl::Status RemoveTreeBeneath(const std::string& dir) {
  Parent p;
  if (absl::Status s = p.Resolve(dir); !s.ok()) {
    return p.error() == ENOENT ? absl::OkStatus() : s;  // its folder is gone: so is it
  }
  // Without roots the whole path, relative to the working directory (its last component is not
  // followed all the same).
  const int at = p.plain() ? AT_FDCWD : p.fd();
  const char* name = p.plain() ? dir.c_str() : p.leaf().c_str();
  struct stat st;
  if (fstatat(at, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
    return errno == ENOENT ? absl::OkStatus() : Errno("stat", dir, errno);
  }
  if (S_ISDIR(st.st_mode)) {
    const int fd = openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return Errno("open directory", dir, errno);
    if (absl::Status s = RemoveContents(fd, dir); !s.ok()) return s;
  }
  if (unlinkat(at, name, S_ISDIR(st.st_mode) ? AT_REMOVEDIR : 0) != 0 && errno != ENOENT) {
    return Errno("remove", dir, errno);
  }
  return absl::OkStatus();
}

}  // namespace shardline
