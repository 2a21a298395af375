// GatherLimiter: the FSDP engine's rate limiter for all-gathers (PyTorch's limit_all_gathers;
// FsdpEngineOptions::limit_all_gathers, docs/fsdp_step.md).
//
// It counts the hook groups that are gathered, from their gather until their free; groups the
// strategy keeps gathered after their forward (SHARD_GRAD_OP) are released from the count, and
// root units are never counted. With the limit on, a prefetch that would make a third gathered
// group is refused (the group is then gathered on demand); on-demand gathers are never refused,
// since on a CPU job nothing could free memory while the training thread waited. The peak count
// is kept with the limit off too (tests and logs compare).
//
// Thread safety: the engine's training thread and autograd hooks, never concurrently.
#ifndef SHARDLINE_FSDP_GATHER_LIMITER_H_
#define SHARDLINE_FSDP_GATHER_LIMITER_H_

#include <cstdint>
#include <set>

namespace shardline::fsdp {

class GatherLimiter {
 public:
  explicit GatherLimiter(bool enabled) : enabled_(enabled) {}

  // Whether hook group `group` may be prefetched now: the limit is off, the group is counted
  // already, or fewer than two groups are. A refusal is counted (prefetches_skipped()).
  bool AllowPrefetch(int group);
  // Counts hook group `group` (>= 0) as gathered.
  void MarkGathered(int group);
  // Stops counting `group` (all its units freed, or kept by the strategy). No-op if not counted.
  void MarkReleased(int group) { gathered_.erase(group); }
  bool IsGathered(int group) const { return gathered_.count(group) > 0; }

  // Most hook groups counted at once so far, and the prefetches refused.
  int peak_gathered_groups() const { return peak_; }
  int64_t prefetches_skipped() const { return skipped_; }

 private:
  static constexpr int kMaxGatheredGroups = 2;
  const bool enabled_;
  std::set<int> gathered_;
  int peak_ = 0;
  int64_t skipped_ = 0;
};

}  // namespace shardline::fsdp

#endif  // SHARDLINE_FSDP_GATHER_LIMITER_H_
