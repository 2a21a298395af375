#include "fsdp/gather_limiter.h"

#include <algorithm>

namespace shardline::fsdp {

bool GatherLimiter::AllowPrefetch(int group) {
  if (!enabled_ || IsGathered(group) || static_cast<int>(gathered_.size()) < kMaxGatheredGroups) {
    return true;
  }
  ++skipped_;
  return false;
}

void GatherLimiter::MarkGathered(int group) {
  gathered_.insert(group);
  peak_ = std::max(peak_, static_cast<int>(gathered_.size()));
}

}  // namespace shardline::fsdp
