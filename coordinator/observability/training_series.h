// TrainingSeries: one job's per-step training metrics (rank 0's logged steps), bounded for runs
// of any length by downsampling.
//
// The rule: every logged step is kept as its own point until the series holds `capacity`
// points. Then adjacent pairs merge (points 0+1, 2+3, ...), halving the series, and from then
// on each stored point stands for twice as many consecutive logged steps (`stride`); new steps
// accumulate in a pending point until it holds `stride` of them. So the series always covers
// the whole run with between capacity/2 and capacity points (plus the pending one) of equal
// width: a million logged steps with capacity 2048 keep 1953 points of 512 steps and a pending
// one. A merged point holds the count-weighted mean of loss, lr, grad norm, tokens/s,
// MFU and step time, the mean validation loss of the steps that evaluated (NaN when none did),
// the highest peak memory, and the last step and time it covers.
//
// A step at or below the newest recorded one from a later attempt than the newest point's (a
// restarted attempt resuming from an older checkpoint) replaces the history from that step on:
// points whose last step is >= it go (a merged point straddling it goes whole). From the same
// attempt it is a report sent again (a worker daemon resending what a restarted coordinator may
// have lost): a step some point already covers changes nothing, and a step none covers (a hole)
// is inserted in order as a point of its own (count 1, also when the stride is larger, until a
// halving merges it), so a resent backlog fills the series' holes and never cuts it.
//
// Thread safety: none; the owner (TrainingMetrics) locks.
#ifndef SHARDLINE_COORDINATOR_OBSERVABILITY_TRAINING_SERIES_H_
#define SHARDLINE_COORDINATOR_OBSERVABILITY_TRAINING_SERIES_H_

#include <cstdint>
#include <vector>

#include "coordinator/state/state.pb.h"
#include "proto/coordinator.pb.h"

namespace shardline::coordinator {

class TrainingSeries {
 public:
  static constexpr int kDefaultCapacity = 2048;

  // `capacity` is rounded up to an even number >= 2.
  explicit TrainingSeries(int capacity = kDefaultCapacity);

  // Adds one logged step: its val_loss is NaN when the step did not evaluate (count, first_step
  // and val_count are set here). Returns false when nothing changed (the same attempt's step is
  // already covered, see above).
  bool Add(const MetricsPoint& point);
  // Whether a point covers `step` (first_step <= step <= step).
  bool Covers(int64_t step) const;

  // The stored points oldest first, the pending partial point last (when it holds any step).
  std::vector<MetricsPoint> Points() const;
  const MetricsPoint& latest() const { return latest_; }
  bool empty() const { return points_.empty() && pending_.count() == 0; }
  int64_t stride() const { return stride_; }
  // Logged steps the series covers (sum of the points' counts).
  int64_t reported_steps() const;
  int capacity() const { return capacity_; }

  // The durable form, and back. FromRecord keeps the record's capacity unless it is smaller
  // than `capacity` (then points merge until they fit).
  JobMetricsRecord ToRecord(const std::string& job_id) const;
  static TrainingSeries FromRecord(const JobMetricsRecord& record, int capacity = kDefaultCapacity);

  // The mean of a and b (a before b), as described above.
  static MetricsPoint Merge(const MetricsPoint& a, const MetricsPoint& b);

 private:
  void Truncate(int64_t step);
  void Push(const MetricsPoint& p);
  // Adds `p` (below the newest step, covered by no point) in step order.
  void Insert(const MetricsPoint& p);
  // Merges adjacent pairs once points_ reaches capacity_ (doubling the stride).
  void HalveIfFull();

  int capacity_;
  int64_t stride_ = 1;
  std::vector<MetricsPoint> points_;
  MetricsPoint pending_;  // count < stride_
  MetricsPoint latest_;
};

}  // namespace shardline::coordinator

#endif  // SHARDLINE_COORDINATOR_OBSERVABILITY_TRAINING_SERIES_H_
