#include "common/secret_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace shardline {

absl::Status CheckOwnerOnlyFile(const std::string& path, absl::string_view what) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat(what, ": cannot read ", path, ": ", strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", path, " is not a regular file"));
  }
  const unsigned mode = st.st_mode & 0777;
  if ((mode & 077) != 0) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "%s: %s has mode %04o: group or other users can read the token in it; run `chmod 600 "
        "%s`",
        what, path, mode, path));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path, absl::string_view what) {
  if (absl::Status s = CheckOwnerOnlyFile(path, what); !s.ok()) return s;
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(what, ": cannot read ", path));
  std::string line;
  std::getline(in, line);
  line = std::string(absl::StripAsciiWhitespace(line));
  if (line.empty()) return absl::InvalidArgumentError(absl::StrCat(what, ": ", path, " is empty"));
  return line;
}

absl::Status WriteOwnerOnlyFile(const std::string& path, absl::string_view content) {
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  unlink(tmp.c_str());
  // O_EXCL: a file (or symlink) someone else put there is not reused with its mode.
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0)
    return absl::InternalError(absl::StrCat("cannot create ", tmp, ": ", strerror(errno)));
  size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string err = strerror(errno);
      close(fd);
      unlink(tmp.c_str());
      return absl::InternalError(absl::StrCat("cannot write ", tmp, ": ", err));
    }
    done += static_cast<size_t>(n);
  }
  if (close(fd) != 0 || rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string err = strerror(errno);
    unlink(tmp.c_str());
    return absl::InternalError(absl::StrCat("cannot write ", path, ": ", err));
  }
  return absl::OkStatus();
}

std::string RandomToken() {
  std::random_device rd;  // /dev/urandom on Linux
  std::string bytes(32, '\0');
  for (char& c : bytes) c = static_cast<char>(rd() & 0xff);
  return absl::BytesToHexString(bytes);
}

}  // namespace shardline
