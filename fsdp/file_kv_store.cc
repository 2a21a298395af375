#include "fsdp/file_kv_store.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace shardline::fsdp {
namespace {

absl::Status MakeDirs(const std::string& path) {
  std::string partial;
  for (size_t i = 0; i <= path.size(); ++i) {
    if (i == path.size() || (path[i] == '/' && i > 0)) {
      partial = path.substr(0, i);
      if (mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) {
        return absl::UnavailableError(
            absl::StrCat("kv store: cannot create directory ", partial, ": ", strerror(errno)));
      }
    }
  }
  return absl::OkStatus();
}

std::string EscapeKey(absl::string_view key) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : key) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
        c == '-' || (c == '.' && !out.empty())) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  // "%" never starts a temp name ("tmp.*" below contains no '%' but starts with "tmp"), and an
  // escaped key always starts with "k" so the two never collide.
  return absl::StrCat("k", out);
}

// Reads the whole file; NOT_FOUND if it does not exist.
absl::StatusOr<std::string> ReadFile(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return absl::NotFoundError(path);
    return absl::UnavailableError(absl::StrCat("kv store: open ", path, ": ", strerror(errno)));
  }
  std::string data;
  char buf[65536];
  while (true) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      close(fd);
      return absl::UnavailableError(absl::StrCat("kv store: read ", path, ": ", strerror(err)));
    }
    if (n == 0) break;
    data.append(buf, n);
  }
  close(fd);
  return data;
}

}  // namespace

absl::StatusOr<std::unique_ptr<FileKvStore>> FileKvStore::Create(const Options& options) {
  if (options.directory.empty()) {
    return absl::InvalidArgumentError("kv store: directory is empty");
  }
  absl::Status made = MakeDirs(options.directory);
  if (!made.ok()) return made;
  return std::unique_ptr<FileKvStore>(new FileKvStore(options));
}

std::string FileKvStore::PathFor(absl::string_view key) const {
  return absl::StrCat(options_.directory, "/", EscapeKey(key));
}

absl::Status FileKvStore::Set(absl::string_view key, absl::string_view value) {
  static std::atomic<uint64_t> counter{0};
  const std::string tmp =
      absl::StrCat(options_.directory, "/tmp.", getpid(), ".",
                   std::hash<std::thread::id>()(std::this_thread::get_id()), ".", counter++);
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat("kv store: create ", tmp, ": ", strerror(errno)));
  }
  size_t done = 0;
  while (done < value.size()) {
    ssize_t n = write(fd, value.data() + done, value.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      close(fd);
      unlink(tmp.c_str());
      return absl::UnavailableError(absl::StrCat("kv store: write ", tmp, ": ", strerror(err)));
    }
    done += n;
  }
  close(fd);
  if (rename(tmp.c_str(), PathFor(key).c_str()) != 0) {
    int err = errno;
    unlink(tmp.c_str());
    return absl::UnavailableError(
        absl::StrCat("kv store: rename to ", PathFor(key), ": ", strerror(err)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> FileKvStore::Get(const std::vector<std::string>& keys,
                                                          absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  std::vector<std::string> values(keys.size());
  std::vector<bool> have(keys.size(), false);
  while (true) {
    std::vector<std::string> missing;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (have[i]) continue;
      absl::StatusOr<std::string> data = ReadFile(PathFor(keys[i]));
      if (data.ok()) {
        values[i] = std::move(*data);
        have[i] = true;
      } else if (absl::IsNotFound(data.status())) {
        missing.push_back(keys[i]);
      } else {
        return data.status();
      }
    }
    if (missing.empty()) return values;
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("kv store: timed out after ", absl::FormatDuration(timeout),
                       " waiting for keys: ", absl::StrJoin(missing, ", ")));
    }
    absl::SleepFor(std::min(options_.poll_interval, deadline - absl::Now()));
  }
}

}  // namespace shardline::fsdp
