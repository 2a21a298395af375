#include "coordinator/testing/small_fs.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"

namespace shardline::coordinator::testing {

absl::StatusOr<std::unique_ptr<SmallFs>> SmallFs::Create(const std::string& dir, int64_t bytes) {
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return absl::UnavailableError(absl::StrCat("mkdir ", dir, ": ", std::strerror(errno)));
  }
  // A private mount namespace: the mount is invisible outside and gone with the process.
  const bool own_ns = ::unshare(CLONE_NEWNS) == 0 &&
                      ::mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0;
  const std::string opts = absl::StrCat("size=", bytes, ",mode=0700");
  if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, opts.c_str()) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot mount a ", bytes, "-byte tmpfs at ", dir,
                                               ": ", std::strerror(errno),
                                               " (needs CAP_SYS_ADMIN)"));
  }
  return std::unique_ptr<SmallFs>(new SmallFs(dir, own_ns));
}

SmallFs::~SmallFs() {
  (void)Free();
  if (!own_ns_) ::umount2(dir_.c_str(), MNT_DETACH);
}

absl::Status SmallFs::Fill() {
  const std::string path = dir_ + "/filler";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) return absl::InternalError(absl::StrCat("open ", path, ": ", std::strerror(errno)));
  const std::string block(4096, 'x');
  absl::Status result;
  while (true) {
    const ssize_t n = ::write(fd, block.data(), block.size());
    if (n > 0) continue;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != ENOSPC) {
      result = absl::InternalError(absl::StrCat("write ", path, ": ", std::strerror(errno)));
    }
    break;
  }
  ::close(fd);
  return result;
}

absl::Status SmallFs::Free() {
  const std::string path = dir_ + "/filler";
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return absl::InternalError(absl::StrCat("unlink ", path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace shardline::coordinator::testing
