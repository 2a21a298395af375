// Batches as tensors: the only torch-dependent part of data/.
//
// Thread safety: pure functions.
#ifndef SHARDLINE_DATA_BATCH_H_
#define SHARDLINE_DATA_BATCH_H_

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"

#include "data/token_dataset.h"

namespace shardline::data {

struct Batch {
  at::Tensor inputs;   // [B, T] int64 token ids.
  at::Tensor targets;  // [B, T] int64: inputs shifted by one.
};

// Reads sequences `indices` of `split` into a CPU batch (move it to the device afterwards).
// Errors: TokenDataset::Read's (DATA_LOSS naming the file when it was truncated after Open).
absl::StatusOr<Batch> ReadBatch(const TokenDataset& dataset, Split split,
                                const std::vector<int64_t>& indices);

}  // namespace shardline::data

#endif  // SHARDLINE_DATA_BATCH_H_
