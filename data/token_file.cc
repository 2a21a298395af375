#include "data/token_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/open_beneath.h"

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
  // Beneath the path policy's roots at the open (common/open_beneath.h).
  absl::StatusOr<int> opened = OpenForRead(path, "data file");
  if (!opened.ok()) return opened.status();
  const int fd = *opened;
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
  return std::unique_ptr<TokenFile>(new TokenFile(path, fd, bytes, width));
}

TokenFile::TokenFile(std::string path, int fd, size_t bytes, int width)
    : path_(std::move(path)),
      fd_(fd),
      bytes_(bytes),
      width_(width),
      num_tokens_(static_cast<int64_t>(bytes / width)) {}

TokenFile::~TokenFile() { close(fd_); }

absl::Status TokenFile::Read(int64_t start, int64_t n, int64_t* out) const {
  // In chunks through a buffer on the stack: a sequence is one pread, a scan a few per MiB.
  constexpr int64_t kChunkBytes = 64 * 1024;
  unsigned char buf[kChunkBytes];
  const int64_t per_chunk = kChunkBytes / width_;
  for (int64_t done = 0; done < n;) {
    const int64_t count = std::min(per_chunk, n - done);
    const size_t want = static_cast<size_t>(count * width_);
    const off_t at = static_cast<off_t>((start + done) * width_);
    size_t got = 0;
    while (got < want) {
      const ssize_t r = pread(fd_, buf + got, want - got, at + static_cast<off_t>(got));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) {
        return absl::InternalError(absl::StrCat("data file \"", path_, "\": read of tokens [",
                                                start, ", ", start + n,
                                                ") failed: ", std::strerror(errno)));
      }
      if (r == 0) {
        return absl::DataLossError(
            absl::StrCat("data file \"", path_, "\": truncated while in use: tokens [", start, ", ",
                         start + n, ") end past its end at byte ", at + static_cast<off_t>(got),
                         " (it had ", bytes_, " bytes when opened)"));
      }
      got += static_cast<size_t>(r);
    }
    const unsigned char* p = buf;
    int64_t* o = out + done;
    switch (width_) {
      case 1:
        for (int64_t i = 0; i < count; ++i) o[i] = p[i];
        break;
      case 2:
        for (int64_t i = 0; i < count; ++i, p += 2) o[i] = p[0] | (p[1] << 8);
        break;
      default:
        for (int64_t i = 0; i < count; ++i, p += 4) {
          o[i] = static_cast<int64_t>(p[0]) | (static_cast<int64_t>(p[1]) << 8) |
                 (static_cast<int64_t>(p[2]) << 16) | (static_cast<int64_t>(p[3]) << 24);
        }
    }
    done += count;
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> TokenFile::MaxToken() const {
  int64_t m = max_token_.load();
  if (m >= 0) return m;
  m = 0;
  constexpr int64_t kTokens = 8 * 1024;
  int64_t ids[kTokens];
  for (int64_t start = 0; start < num_tokens_; start += kTokens) {
    const int64_t n = std::min(kTokens, num_tokens_ - start);
    absl::Status s = Read(start, n, ids);
    if (!s.ok()) return s;
    for (int64_t i = 0; i < n; ++i) m = std::max(m, ids[i]);
  }
  max_token_.store(m);
  return m;
}

}  // namespace shardline::data
