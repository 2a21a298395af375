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

}  // namespace shardline::data
