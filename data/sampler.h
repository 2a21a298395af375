// DistributedSampler: which training sequences each data-parallel rank reads, step by step.
//
// An epoch is a permutation of the N training sequences, shuffled deterministically from
// (seed, epoch). Each optimizer step consumes the next G = global_batch_size positions of that
// order (the global batch), the same G sequences at any world size W. Inside the global batch,
// micro-step m (of A = G / (micro_batch * W) accumulation steps) gives rank r the positions
//   [m*W*B + r*B, m*W*B + (r+1)*B)        (B = micro_batch_size)
// so ranks read disjoint parts and together read the whole global batch. An epoch's last
// N mod G sequences are skipped (every step sees a full global batch).
//
// The cursor (epoch, position) says where the next global batch starts; position counts global
// sequences consumed in the epoch. A checkpoint stores it; Restore() continues exactly where the
// saved run would have, whatever the new W.
//
// Thread safety: not thread-safe; one sampler per rank, used by the training thread.
#ifndef SHARDLINE_DATA_SAMPLER_H_
#define SHARDLINE_DATA_SAMPLER_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace shardline::data {

struct DataCursor {
  int64_t epoch = 0;
  int64_t position = 0;  // Global sequences consumed in `epoch`; a multiple of G.
  bool operator==(const DataCursor& o) const { return epoch == o.epoch && position == o.position; }
};

class DistributedSampler {
 public:
  struct Options {
    int64_t num_samples = 0;    // N: training sequences.
    int global_batch_size = 0;  // G.
    int micro_batch_size = 0;   // B.
    int world_size = 1;         // W.
    int rank = 0;
    uint64_t seed = 0;
  };
  // Errors: INVALID_ARGUMENT when G is not divisible by B * W, when N < G (not one global batch
  // per epoch), or for a rank outside [0, W). Messages name the values.
  static absl::StatusOr<DistributedSampler> Create(const Options& options);

  int accumulation_steps() const { return accumulation_steps_; }  // A = G / (B * W).
  int64_t steps_per_epoch() const { return options_.num_samples / options_.global_batch_size; }

  // This rank's sample indices for the next global batch: A micro-batches of B indices each.
  // Advances the cursor (to the next epoch after its last full batch).
  std::vector<std::vector<int64_t>> Next();

  const DataCursor& cursor() const { return cursor_; }
  // Continues from `cursor`. Errors: INVALID_ARGUMENT when the position is negative, not a
  // multiple of G or past the epoch's last full batch.
  absl::Status Restore(const DataCursor& cursor);

  // Where the cursor is after `steps` steps from (0, 0): epoch steps / S, position
  // (steps mod S) x G, with S = steps_per_epoch().
  DataCursor CursorAfterSteps(int64_t steps) const;

  // The order of `epoch`: a permutation of [0, N), the same on every rank and every run.
  std::vector<int64_t> EpochOrder(int64_t epoch) const;

 private:
  explicit DistributedSampler(const Options& options);

  Options options_;
  int accumulation_steps_;
  DataCursor cursor_;
  int64_t order_epoch_ = -1;  // Epoch that order_ holds.
  std::vector<int64_t> order_;
};

// Indices of the validation sequences rank `rank` evaluates in evaluation batch `batch`: B
// consecutive sequences, ranks interleaved, wrapping around the N_val sequences. Fixed (no
// shuffle) so that validation losses compare across steps and runs.
std::vector<int64_t> ValidationIndices(int64_t batch, int micro_batch_size, int world_size,
                                       int rank, int64_t num_val_samples);

}  // namespace shardline::data

#endif  // SHARDLINE_DATA_SAMPLER_H_
