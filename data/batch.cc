#include "data/batch.h"

#include <ATen/ATen.h>

namespace shardline::data {
namespace {

// Rows of seq_len + 1 tokens; `read` fills one.
template <typename ReadRow>
absl::StatusOr<Batch> Rows(const TokenDataset& dataset, const std::vector<int64_t>& indices,
                           ReadRow read) {
  const int64_t b = static_cast<int64_t>(indices.size());
  const int64_t t = dataset.seq_len();
  at::Tensor rows = at::empty({b, t + 1}, at::kLong);
  int64_t* p = rows.data_ptr<int64_t>();
  for (int64_t i = 0; i < b; ++i) {
    absl::Status s = read(indices[i], p + i * (t + 1));
    if (!s.ok()) return s;
  }
  return Batch{rows.narrow(1, 0, t).contiguous(), rows.narrow(1, 1, t).contiguous()};
}

}  // namespace

absl::StatusOr<Batch> ReadBatch(const TokenDataset& dataset, Split split,
                                const std::vector<int64_t>& indices) {
  return Rows(dataset, indices,
              [&](int64_t index, int64_t* out) { return dataset.Read(split, index, out); });
}

}  // namespace shardline::data
