// TokenFile: a read-only, memory-mapped sequence of token ids.
//
// Formats (DataSpec::Format's values, as a plain enum so that LibTorch code may include this
// header: LibTorch ships older protobuf headers that break generated .pb.h files in torch
// targets): kText (each byte is a token, the byte-level tokenizer), kU16 and kU32
// (little-endian ids, no header). The file is mapped, not read, so a multi-GB
// corpus costs only the pages each rank touches.
//
// Thread safety: immutable after Open; Get/Copy may be called from any thread.
#ifndef SHARDLINE_DATA_TOKEN_FILE_H_
#define SHARDLINE_DATA_TOKEN_FILE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace shardline::data {

enum class TokenFormat { kText, kU16, kU32 };
const char* TokenFormatName(TokenFormat format);  // "TEXT", "TOKENS_U16", "TOKENS_U32".

class TokenFile {
 public:
  // Errors: NOT_FOUND (missing file), INVALID_ARGUMENT (empty file, size not a multiple of the
  // token width), INTERNAL (mmap failed). Messages name the path.
  static absl::StatusOr<std::unique_ptr<TokenFile>> Open(const std::string& path,
                                                         TokenFormat format);
  ~TokenFile();
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  int64_t size() const { return num_tokens_; }  // Number of tokens.
  int64_t Get(int64_t i) const;                 // Requires 0 <= i < size().
  // Copies tokens [start, start + n) into out. Requires the range to be inside the file.
  void Copy(int64_t start, int64_t n, int64_t* out) const;
  // Largest id in the file (scans it once; cached).
  int64_t MaxToken() const;
  const std::string& path() const { return path_; }

 private:
  TokenFile(std::string path, const unsigned char* base, size_t bytes, int width);

  std::string path_;
  const unsigned char* base_;
  size_t bytes_;
  int width_;  // Bytes per token: 1, 2 or 4.
  int64_t num_tokens_;
  mutable int64_t max_token_ = -1;
};

}  // namespace shardline::data

#endif  // SHARDLINE_DATA_TOKEN_FILE_H_
