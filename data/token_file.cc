#include "data/token_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace shardline::data {

const char* TokenFormatName(TokenFormat format) {
  switch (format) {
    case TokenFormat::kText:
      return "TEXT";
    case TokenFormat::kU16:
      return "TOKENS_U16";
    case TokenFormat::kU32:
      return "TOKENS_U32";
  }
  return "?";
}

absl::StatusOr<std::unique_ptr<TokenFile>> TokenFile::Open(const std::string& path,
                                                           TokenFormat format) {
  const int width = format == TokenFormat::kText ? 1 : format == TokenFormat::kU16 ? 2 : 4;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    const std::string msg = absl::StrCat("data file \"", path, "\": ", std::strerror(err));
    return err == ENOENT ? absl::NotFoundError(msg) : absl::PermissionDeniedError(msg);
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    close(fd);
    return absl::InternalError(absl::StrCat("data file \"", path, "\": fstat failed"));
  }
  const size_t bytes = static_cast<size_t>(st.st_size);
  if (bytes == 0 || bytes % width != 0) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat(
        "data file \"", path, "\": ", bytes, " bytes is ",
        bytes == 0 ? "empty" : absl::StrCat("not a multiple of the token width ", width),
        " (data.format ", TokenFormatName(format), ")"));
  }
  void* base = mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);  // The mapping stays valid.
  if (base == MAP_FAILED) {
    return absl::InternalError(
        absl::StrCat("data file \"", path, "\": mmap failed: ", std::strerror(errno)));
  }
  return std::unique_ptr<TokenFile>(
      new TokenFile(path, static_cast<const unsigned char*>(base), bytes, width));
}

TokenFile::TokenFile(std::string path, const unsigned char* base, size_t bytes, int width)
    : path_(std::move(path)),
      base_(base),
      bytes_(bytes),
      width_(width),
      num_tokens_(static_cast<int64_t>(bytes / width)) {}

TokenFile::~TokenFile() { munmap(const_cast<unsigned char*>(base_), bytes_); }

int64_t TokenFile::Get(int64_t i) const {
  const unsigned char* p = base_ + i * width_;
  switch (width_) {
    case 1:
      return p[0];
    case 2:
      return p[0] | (p[1] << 8);
    default:
      return static_cast<int64_t>(p[0]) | (static_cast<int64_t>(p[1]) << 8) |
             (static_cast<int64_t>(p[2]) << 16) | (static_cast<int64_t>(p[3]) << 24);
  }
}

void TokenFile::Copy(int64_t start, int64_t n, int64_t* out) const {
  for (int64_t i = 0; i < n; ++i) out[i] = Get(start + i);
}

int64_t TokenFile::MaxToken() const {
  if (max_token_ < 0) {
    int64_t m = 0;
    for (int64_t i = 0; i < num_tokens_; ++i) m = std::max(m, Get(i));
    max_token_ = m;
  }
  return max_token_;
}

}  // namespace shardline::data
