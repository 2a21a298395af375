// TokenVocab: each token id's bytes, from the vocabulary file tools/prepare_data.py writes
// (data.vocab_path), so the C++ trainer can show samples of token data as text and encode the
// sample prompt without running the tokenizer (which is Python).
//
//   # shardline token bytes v1 ...      header line
//   46697273                             id 0's bytes in hex ("Firs"); an empty line: no bytes
//   ...                                  (special tokens)
//
// Decode concatenates the ids' bytes: exactly the tokenizer's decoding for byte-level BPE
// (GPT-2 style, the BPE prepare_data.py trains); for sentencepiece and other tokenizers it
// misses their leading-space rules. Encode is a greedy longest match over the bytes: it always
// decodes back to the prompt (when every byte of it is some token's bytes) but need not be the
// tokenizer's own segmentation, so a prompt can look slightly unusual to the model.
//
// Thread safety: immutable after Load.
#ifndef SHARDLINE_DATA_VOCAB_H_
#define SHARDLINE_DATA_VOCAB_H_

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shardline::data {

class TokenVocab {
 public:
  // Errors: NOT_FOUND (missing file), INVALID_ARGUMENT naming the file and line (no header,
  // bad hex, over 1 << 24 ids or 256 bytes per token).
  static absl::StatusOr<std::unique_ptr<TokenVocab>> Load(const std::string& path);

  int64_t size() const { return static_cast<int64_t>(bytes_.size()); }
  // Errors: INVALID_ARGUMENT naming the first byte offset no token starts with.
  absl::StatusOr<std::vector<int64_t>> Encode(absl::string_view text) const;
  // Ids outside the vocabulary decode to '?'.
  std::string Decode(const std::vector<int64_t>& ids) const;
  // Decode, then invalid UTF-8 and control characters other than newline and tab become U+FFFD
  // (as ByteTokenizer::DecodeForDisplay).
  std::string DecodeForDisplay(const std::vector<int64_t>& ids) const;

 private:
  std::vector<std::string> bytes_;                     // By id.
  std::unordered_map<std::string, int64_t> by_bytes_;  // Lowest id of each byte string.
  size_t longest_ = 0;
};

}  // namespace shardline::data

#endif  // SHARDLINE_DATA_VOCAB_H_
