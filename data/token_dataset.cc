#include "data/token_dataset.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace shardline::data {
namespace {

int64_t SequencesIn(int64_t tokens, int seq_len) {
  return tokens > seq_len ? (tokens - 1) / seq_len : 0;
}

// Every id of `file` below vocab_size (text is bytes: checked only for a vocabulary below 256).
absl::Status CheckIds(const TokenFile& file, TokenFormat format, int64_t vocab_size) {
  if (format == TokenFormat::kText && vocab_size >= 256) return absl::OkStatus();
  ASSIGN_OR_RETURN(const int64_t max_id, file.MaxToken());
  if (max_id >= vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat("data file \"", file.path(), "\": token id ",
                                                   max_id, " is >= model.vocab_size ", vocab_size));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status TokenDataset::Stream::Read(int64_t begin, int64_t n, int64_t* out) const {
  // The file holding `begin`: the last start <= begin.
  size_t f =
      static_cast<size_t>(std::upper_bound(starts.begin(), starts.end(), begin) - starts.begin()) -
      1;
  while (n > 0) {
    const int64_t offset = begin - starts[f];
    const int64_t take = std::min(n, files[f]->size() - offset);
    RETURN_IF_ERROR(files[f]->Read(offset, take, out));
    begin += take;
    out += take;
    n -= take;
    ++f;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<TokenDataset>> TokenDataset::Open(const Options& o) {
  if (o.seq_len <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("data.seq_len: ", o.seq_len, " must be positive"));
  }
  if (!o.val_path.empty() && o.val_fraction != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("data.val_fraction: ", o.val_fraction, " must be 0 with data.val_path"));
  }
  const std::vector<std::string> paths =
      o.paths.empty() ? std::vector<std::string>{o.path} : o.paths;
  Stream train, val;
  for (const std::string& path : paths) {
    ASSIGN_OR_RETURN(std::unique_ptr<TokenFile> file, TokenFile::Open(path, o.format));
    RETURN_IF_ERROR(CheckIds(*file, o.format, o.vocab_size));
    train.starts.push_back(train.size);
    train.size += file->size();
    train.files.push_back(std::move(file));
  }
  const std::string name =
      paths.size() == 1 ? absl::StrCat("data file \"", paths[0], "\"")
                        : absl::StrCat("data files \"", absl::StrJoin(paths, "\", \""), "\"");
  int64_t val_begin = 0;
  if (!o.val_path.empty()) {
    ASSIGN_OR_RETURN(std::unique_ptr<TokenFile> file, TokenFile::Open(o.val_path, o.format));
    RETURN_IF_ERROR(CheckIds(*file, o.format, o.vocab_size));
    val.starts.push_back(0);
    val.size = file->size();
    val.files.push_back(std::move(file));
    if (SequencesIn(val.size, o.seq_len) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("data.val_path \"", o.val_path, "\": its ", val.size,
                       " tokens hold no sequence of data.seq_len ", o.seq_len, " + 1"));
    }
    val_begin = 0;
  }
  const int64_t n = train.size;
  const int64_t val_tokens =
      o.val_path.empty() ? static_cast<int64_t>(std::floor(n * o.val_fraction)) : 0;
  const int64_t train_end = n - val_tokens;
  if (SequencesIn(train_end, o.seq_len) == 0) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": its ", train_end,
                                                   " training tokens hold no sequence of ",
                                                   "data.seq_len ", o.seq_len, " + 1"));
  }
  if (o.val_path.empty()) {
    val_begin = train_end;
    if (o.val_fraction > 0 && SequencesIn(val_tokens, o.seq_len) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": its ", val_tokens, " validation tokens (data.val_fraction ",
                       o.val_fraction, ") hold no sequence of data.seq_len ", o.seq_len, " + 1"));
    }
  }
  return std::unique_ptr<TokenDataset>(
      new TokenDataset(std::move(train), std::move(val), o.seq_len, val_begin));
}

TokenDataset::TokenDataset(Stream train, Stream val, int seq_len, int64_t val_begin)
    : train_(std::move(train)), val_(std::move(val)), seq_len_(seq_len), val_begin_(val_begin) {}

int64_t TokenDataset::num_tokens() const { return train_.size; }

int64_t TokenDataset::num_samples(Split split) const {
  if (split == Split::kVal) {
    return val_.files.empty() ? SequencesIn(train_.size - val_begin_, seq_len_)
                              : SequencesIn(val_.size, seq_len_);
  }
  return SequencesIn(val_.files.empty() ? val_begin_ : train_.size, seq_len_);
}

absl::Status TokenDataset::Read(Split split, int64_t index, int64_t* out) const {
  if (split == Split::kVal && !val_.files.empty()) {
    return val_.Read(index * seq_len_, seq_len_ + 1, out);
  }
  const int64_t begin = (split == Split::kTrain ? 0 : val_begin_) + index * seq_len_;
  return train_.Read(begin, seq_len_ + 1, out);
}

}  // namespace shardline::data
