#include "data/batch.h"

#include <ATen/ATen.h>

namespace shardline::data {

Batch MakeBatch(const TokenDataset& dataset, Split split, const std::vector<int64_t>& indices) {
  const int64_t b = static_cast<int64_t>(indices.size());
  const int64_t t = dataset.seq_len();
  at::Tensor rows = at::empty({b, t + 1}, at::kLong);
  int64_t* p = rows.data_ptr<int64_t>();
  for (int64_t i = 0; i < b; ++i) dataset.Copy(split, indices[i], p + i * (t + 1));
  return Batch{rows.narrow(1, 0, t).contiguous(), rows.narrow(1, 1, t).contiguous()};
}

}  // namespace shardline::data
