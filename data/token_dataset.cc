#include "data/token_dataset.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace shardline::data {
namespace {

int64_t SequencesIn(int64_t tokens, int seq_len) {
  return tokens > seq_len ? (tokens - 1) / seq_len : 0;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TokenDataset>> TokenDataset::Open(const Options& o) {
  if (o.seq_len <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("data.seq_len: ", o.seq_len, " must be positive"));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<TokenFile> file, TokenFile::Open(o.path, o.format));
  const int64_t n = file->size();
  const int64_t val_tokens = static_cast<int64_t>(std::floor(n * o.val_fraction));
  const int64_t val_begin = n - val_tokens;
  if (SequencesIn(val_begin, o.seq_len) == 0) {
    return absl::InvalidArgumentError(absl::StrCat("data file \"", o.path, "\": its ", val_begin,
                                                   " training tokens hold no sequence of ",
                                                   "data.seq_len ", o.seq_len, " + 1"));
  }
  if (o.val_fraction > 0 && SequencesIn(val_tokens, o.seq_len) == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data file \"", o.path, "\": its ", val_tokens, " validation tokens (data.val_fraction ",
        o.val_fraction, ") hold no sequence of data.seq_len ", o.seq_len, " + 1"));
  }
  // Text is bytes (< 256); token files are checked once against the model's vocabulary.
  if (o.format != TokenFormat::kText || o.vocab_size < 256) {
    ASSIGN_OR_RETURN(const int64_t max_id, file->MaxToken());
    if (max_id >= o.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("data file \"", o.path, "\": token id ",
                                                     max_id, " is >= model.vocab_size ",
                                                     o.vocab_size));
    }
  }
  return std::unique_ptr<TokenDataset>(new TokenDataset(std::move(file), o.seq_len, val_begin));
}

TokenDataset::TokenDataset(std::unique_ptr<TokenFile> file, int seq_len, int64_t val_begin)
    : file_(std::move(file)), seq_len_(seq_len), val_begin_(val_begin) {}

int64_t TokenDataset::num_samples(Split split) const {
  return split == Split::kTrain ? SequencesIn(val_begin_, seq_len_)
                                : SequencesIn(file_->size() - val_begin_, seq_len_);
}

absl::Status TokenDataset::Read(Split split, int64_t index, int64_t* out) const {
  const int64_t begin = (split == Split::kTrain ? 0 : val_begin_) + index * seq_len_;
  return file_->Read(begin, seq_len_ + 1, out);
}

}  // namespace shardline::data
