// Byte-level tokenizer: token id = byte value (vocab 256). Lossless for any input, including
// invalid UTF-8, so it needs no vocabulary file.
//
// Thread safety: stateless.
#ifndef SHARDLINE_DATA_BYTE_TOKENIZER_H_
#define SHARDLINE_DATA_BYTE_TOKENIZER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace shardline::data {

class ByteTokenizer {
 public:
  static constexpr int kVocabSize = 256;
  std::vector<int64_t> Encode(absl::string_view text) const;
  // Ids outside [0, 256) (a model with a larger vocabulary may sample them) decode to '?'.
  std::string Decode(const std::vector<int64_t>& ids) const;
  // Decode for people and JSON: invalid UTF-8 and control characters other than newline and
  // tab (which an undertrained model emits freely) become U+FFFD, so the text is valid UTF-8
  // and cannot drive a terminal.
  std::string DecodeForDisplay(const std::vector<int64_t>& ids) const;
};

}  // namespace shardline::data

#endif  // SHARDLINE_DATA_BYTE_TOKENIZER_H_
