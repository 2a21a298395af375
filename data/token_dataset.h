// TokenDataset: a token file cut into a training part (the head) and a validation part (the
// tail, data.val_fraction of the tokens), each read as non-overlapping sequences.
//
// Sequence i of a part covers tokens [begin + i*T, begin + i*T + T + 1) of that part (T =
// seq_len): T inputs and the T next-token targets shifted by one, so consecutive sequences
// share one boundary token.
//
// Thread safety: immutable after Open; Read and Copy may be called from any thread.
#ifndef SHARDLINE_DATA_TOKEN_DATASET_H_
#define SHARDLINE_DATA_TOKEN_DATASET_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "data/token_file.h"

namespace shardline::data {

enum class Split { kTrain, kVal };

class TokenDataset {
 public:
  struct Options {
    std::string path;
    TokenFormat format = TokenFormat::kText;
    double val_fraction = 0.1;
    int seq_len = 0;
    int64_t vocab_size = 256;  // Every id must be below it (checked at Open).
  };
  // Errors: those of TokenFile::Open; INVALID_ARGUMENT when a part holds no full sequence
  // (validation only when val_fraction > 0) or an id is >= vocab_size.
  static absl::StatusOr<std::unique_ptr<TokenDataset>> Open(const Options& options);

  int seq_len() const { return seq_len_; }
  int64_t num_samples(Split split) const;
  // Copies sequence `index` of `split` (seq_len + 1 tokens) into `out`. Errors: those of
  // TokenFile::Read (DATA_LOSS naming the file when it was truncated after Open).
  absl::Status Read(Split split, int64_t index, int64_t* out) const;
  int64_t num_tokens() const { return file_->size(); }

 private:
  TokenDataset(std::unique_ptr<TokenFile> file, int seq_len, int64_t val_begin);

  std::unique_ptr<TokenFile> file_;
  int seq_len_;
  int64_t val_begin_;  // First token of the validation part.
};

}  // namespace shardline::data

#endif  // SHARDLINE_DATA_TOKEN_DATASET_H_
