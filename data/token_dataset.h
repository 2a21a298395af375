// TokenDataset: token files cut into a training part and a validation part, each read as
// non-overlapping sequences.
//
// The training files (Options::paths, or the one Options::path) are read one after another as
// one token stream (a sequence may span two files, as documents run into each other in one
// file). Validation is Options::val_path when set (all of it), otherwise the tail of the stream
// (val_fraction of its tokens; the training part is the head).
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
#include <vector>

#include "absl/status/statusor.h"
#include "data/token_file.h"

namespace shardline::data {

enum class Split { kTrain, kVal };

class TokenDataset {
 public:
  struct Options {
    std::string path;  // The training file (or see paths).
    TokenFormat format = TokenFormat::kText;
    double val_fraction = 0.1;  // Must be 0 with val_path.
    int seq_len = 0;
    int64_t vocab_size = 256;        // Every id must be below it (checked at Open).
    std::vector<std::string> paths;  // The training files in order (then path is unused).
    std::string val_path;            // The validation file; "" for the stream's tail.
  };
  // Errors: those of TokenFile::Open; INVALID_ARGUMENT when a part holds no full sequence
  // (validation only when val_fraction > 0) or an id is >= vocab_size.
  static absl::StatusOr<std::unique_ptr<TokenDataset>> Open(const Options& options);

  int seq_len() const { return seq_len_; }
  int64_t num_samples(Split split) const;
  // Copies sequence `index` of `split` (seq_len + 1 tokens) into `out`. Errors: those of
  // TokenFile::Read (DATA_LOSS naming the file when it was truncated after Open).
  absl::Status Read(Split split, int64_t index, int64_t* out) const;
  // Tokens of the training stream (all training files, with its validation tail if any).
  int64_t num_tokens() const;

 private:
  // Files read as one stream: token t is in the file whose [start, start + size) holds it.
  struct Stream {
    std::vector<std::unique_ptr<TokenFile>> files;
    std::vector<int64_t> starts;
    int64_t size = 0;
    absl::Status Read(int64_t begin, int64_t n, int64_t* out) const;
  };
  TokenDataset(Stream train, Stream val, int seq_len, int64_t val_begin);

  Stream train_;
  Stream val_;  // Empty without val_path (validation is train_'s tail).
  int seq_len_;
  int64_t val_begin_;  // First token of the validation part in its stream.
};

}  // namespace shardline::data

#endif  // SHARDLINE_DATA_TOKEN_DATASET_H_
