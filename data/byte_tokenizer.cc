#include "data/byte_tokenizer.h"

namespace shardline::data {

std::vector<int64_t> ByteTokenizer::Encode(absl::string_view text) const {
  std::vector<int64_t> ids;
  ids.reserve(text.size());
  for (char c : text) ids.push_back(static_cast<unsigned char>(c));
  return ids;
}

std::string ByteTokenizer::Decode(const std::vector<int64_t>& ids) const {
  std::string text;
  text.reserve(ids.size());
  for (int64_t id : ids) text.push_back(id >= 0 && id < kVocabSize ? static_cast<char>(id) : '?');
  return text;
}

namespace {

constexpr char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD

// Length of the valid UTF-8 sequence starting at text[i], or 0 when it is not one.
size_t ValidSequenceLength(const std::string& text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char b = byte(i);
  size_t n;
  uint32_t cp;
  if (b < 0x80) return 1;
  if ((b & 0xE0) == 0xC0) {
    n = 2;
    cp = b & 0x1F;
  } else if ((b & 0xF0) == 0xE0) {
    n = 3;
    cp = b & 0x0F;
  } else if ((b & 0xF8) == 0xF0) {
    n = 4;
    cp = b & 0x07;
  } else
    return 0;
  if (i + n > text.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3F);
  }
  // Overlong forms, surrogates and values past U+10FFFF are invalid.
  static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[n] || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return 0;
  return n;
}

}  // namespace

std::string ByteTokenizer::DecodeForDisplay(const std::vector<int64_t>& ids) const {
  const std::string raw = Decode(ids);
  std::string out;
  out.reserve(raw.size());
  for (size_t i = 0; i < raw.size();) {
    const size_t n = ValidSequenceLength(raw, i);
    const unsigned char b = static_cast<unsigned char>(raw[i]);
    if (n == 0 || (n == 1 && ((b < 0x20 && b != '\n' && b != '\t') || b == 0x7F))) {
      out += kReplacement;
      i += 1;
    } else {
      out.append(raw, i, n);
      i += n;
    }
  }
  return out;
}

}  // namespace shardline::data
