#include "data/vocab.h"

#include <fstream>
#include <sstream>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/open_beneath.h"
#include "data/byte_tokenizer.h"

namespace shardline::data {
namespace {

constexpr int64_t kMaxIds = 1 << 24;
constexpr size_t kMaxTokenBytes = 256;

bool IsHex(absl::string_view s) {
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'))) return false;
  }
  return s.size() % 2 == 0;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TokenVocab>> TokenVocab::Load(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFileBeneath(path, "data.vocab_path");
  if (absl::IsNotFound(text.status())) {
    return absl::NotFoundError(absl::StrCat("data.vocab_path: \"", path, "\" cannot be read"));
  }
  if (!text.ok()) return text.status();
  std::istringstream in(*text);
  auto v = std::unique_ptr<TokenVocab>(new TokenVocab());
  std::string line;
  if (!std::getline(in, line) || !absl::StartsWith(line, "# shardline token bytes v1")) {
    return absl::InvalidArgumentError(
        absl::StrCat("data.vocab_path: \"", path,
                     "\" does not start with \"# shardline token bytes v1\" "
                     "(write it with tools/prepare_data.py)"));
  }
  int64_t line_no = 1;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!IsHex(line) || line.size() / 2 > kMaxTokenBytes ||
        static_cast<int64_t>(v->bytes_.size()) >= kMaxIds) {
      return absl::InvalidArgumentError(absl::StrCat("data.vocab_path: \"", path, "\" line ",
                                                     line_no,
                                                     " is not a token's bytes in hex (at most ",
                                                     kMaxTokenBytes, " bytes, ", kMaxIds, " ids)"));
    }
    const int64_t id = static_cast<int64_t>(v->bytes_.size());
    v->bytes_.push_back(absl::HexStringToBytes(line));
    const std::string& b = v->bytes_.back();
    if (!b.empty()) {
      v->by_bytes_.emplace(b, id);  // Keeps the lowest id of duplicates.
      v->longest_ = std::max(v->longest_, b.size());
    }
  }
  return v;
}

absl::StatusOr<std::vector<int64_t>> TokenVocab::Encode(absl::string_view text) const {
  std::vector<int64_t> ids;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t n = std::min(longest_, text.size() - pos);
    for (; n > 0; --n) {
      auto it = by_bytes_.find(std::string(text.substr(pos, n)));
      if (it != by_bytes_.end()) {
        ids.push_back(it->second);
        break;
      }
    }
    if (n == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("train.sample_prompt: byte ", pos, " starts no token of the vocabulary"));
    }
    pos += n;
  }
  return ids;
}

std::string TokenVocab::Decode(const std::vector<int64_t>& ids) const {
  std::string out;
  for (int64_t id : ids) {
    if (id >= 0 && id < size()) {
      out += bytes_[static_cast<size_t>(id)];
    } else {
      out += '?';
    }
  }
  return out;
}

std::string TokenVocab::DecodeForDisplay(const std::vector<int64_t>& ids) const {
  const std::string raw = Decode(ids);
  return ByteTokenizer().DecodeForDisplay(
      std::vector<int64_t>(reinterpret_cast<const unsigned char*>(raw.data()),
                           reinterpret_cast<const unsigned char*>(raw.data()) + raw.size()));
}

}  // namespace shardline::data
