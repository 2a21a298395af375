#include "fsdp/loss_scaler.h"

#include <algorithm>

namespace shardline::fsdp {

void DynamicLossScaler::Update(bool found_nonfinite) {
  if (found_nonfinite) {
    ++skipped_;
    good_steps_ = 0;
    scale_ = std::max(options_.min_scale, scale_ * options_.backoff_factor);
    return;
  }
  if (++good_steps_ >= options_.growth_interval) {
    good_steps_ = 0;
    scale_ *= options_.growth_factor;
  }
}

}  // namespace shardline::fsdp
