#include "coordinator/checkpoints/bounded_file_read.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace shardline::coordinator {
namespace {

const char* KindOf(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISDIR(mode)) return "a directory";
  return "not a plain file";
}

absl::StatusOr<std::string> ReadNow(const std::string& path, int64_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) {
      return absl::NotFoundError(absl::StrCat("missing ", path));
    }
    return absl::UnavailableError(absl::StrCat("cannot open ", path, ": ", std::strerror(err)));
  }
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot stat ", path, ": ", std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " is not a regular file (", KindOf(st.st_mode), "); not read"));
  }
  if (st.st_size > max_bytes) {
    return absl::OutOfRangeError(
        absl::StrCat(path, " has ", st.st_size, " bytes, more than the ", max_bytes, " allowed"));
  }
  std::string out;
  char buf[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return absl::UnavailableError(absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (static_cast<int64_t>(out.size()) > max_bytes) {
      return absl::OutOfRangeError(
          absl::StrCat(path, " grew past the ", max_bytes, " bytes allowed while being read"));
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<std::string> ReadRegularFileBounded(const std::string& path, absl::Duration timeout,
                                                   int64_t max_bytes) {
  struct Shared {
    absl::Mutex mu;
    bool done = false;
    absl::StatusOr<std::string> result;
  };
  auto shared = std::make_shared<Shared>();
  std::thread([shared, path, max_bytes] {
    absl::StatusOr<std::string> r = ReadNow(path, max_bytes);
    absl::MutexLock lock(&shared->mu);
    shared->result = std::move(r);
    shared->done = true;
  }).detach();
  absl::MutexLock lock(&shared->mu);
  if (!shared->mu.AwaitWithTimeout(absl::Condition(&shared->done), timeout)) {
    return absl::DeadlineExceededError(absl::StrCat("reading ", path, " took longer than ",
                                                    absl::FormatDuration(timeout), "; gave up"));
  }
  return std::move(shared->result);
}

}  // namespace shardline::coordinator
