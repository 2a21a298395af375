// TokenFile: a read-only sequence of token ids in a file.
//
// Formats (DataSpec::Format's values, as a plain enum so that LibTorch code may include this
// header: LibTorch ships older protobuf headers that break generated .pb.h files in torch
// targets): kText (each byte is a token, the byte-level tokenizer), kU16 and kU32
// (little-endian ids, no header). Tokens are read with pread(2) when asked for, so a multi-GB
// corpus costs only the pages each rank reads, and a file truncated (or replaced in place)
// while a run reads it gives DATA_LOSS naming the file, not a SIGBUS as a mapping would.
//
// Thread safety: immutable after Open; Read and MaxToken may be called from any thread.
#ifndef SHARDLINE_DATA_TOKEN_FILE_H_
#define SHARDLINE_DATA_TOKEN_FILE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace shardline::data {

enum class TokenFormat { kText, kU16, kU32 };
const char* TokenFormatName(TokenFormat format);  // "TEXT", "TOKENS_U16", "TOKENS_U32".

class TokenFile {
 public:
  // Errors: NOT_FOUND (missing file), PERMISSION_DENIED (cannot open), INVALID_ARGUMENT (empty
  // file, size not a multiple of the token width), INTERNAL (fstat failed). Messages name the
  // path.
  static absl::StatusOr<std::unique_ptr<TokenFile>> Open(const std::string& path,
                                                         TokenFormat format);
  ~TokenFile();
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  int64_t size() const { return num_tokens_; }  // Number of tokens (as opened).
  // Copies tokens [start, start + n) into out. Requires 0 <= start, n >= 0, start + n <= size().
  // Errors: DATA_LOSS naming the file and the token range when the file has become shorter
  // since Open; INTERNAL naming the file for other read errors.
  absl::Status Read(int64_t start, int64_t n, int64_t* out) const;
  // Largest id in the file (scans it once; cached). Errors: as Read.
  absl::StatusOr<int64_t> MaxToken() const;
  const std::string& path() const { return path_; }

 private:
  TokenFile(std::string path, int fd, size_t bytes, int width);

  std::string path_;
  int fd_;
  size_t bytes_;
  int width_;  // Bytes per token: 1, 2 or 4.
  int64_t num_tokens_;
  mutable std::atomic<int64_t> max_token_{-1};
};

}  // namespace shardline::data

#endif  // SHARDLINE_DATA_TOKEN_FILE_H_
