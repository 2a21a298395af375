#include "coordinator/observability/training_series.h"

#include "coordinator/observability/training_metrics.h"

#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace shardline::coordinator {
namespace {

MetricsPoint Step(int64_t step, double loss, double val_loss = NAN) {
  MetricsPoint p;
  p.set_step(step);
  p.set_loss(loss);
  p.set_lr(0.1);
  p.set_tokens_per_s(100.0 * static_cast<double>(step));
  p.set_peak_memory_bytes(step * 10);
  p.set_val_loss(val_loss);
  p.set_time_unix_ms(1000 + step);
  return p;
}

std::vector<int64_t> Steps(const TrainingSeries& s) {
  std::vector<int64_t> out;
  for (const MetricsPoint& p : s.Points()) out.push_back(p.step());
  return out;
}

TEST(TrainingSeries, KeepsEveryStepUpToCapacity) {
  TrainingSeries s(4);
  for (int i = 1; i <= 3; ++i) s.Add(Step(i, i));
  EXPECT_EQ(Steps(s), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(s.stride(), 1);
  EXPECT_EQ(s.Points()[1].count(), 1);
  EXPECT_TRUE(std::isnan(s.Points()[1].val_loss()));
}

TEST(TrainingSeries, MergesPairsWhenFullThenAccumulatesStrideSteps) {
  TrainingSeries s(4);
  for (int i = 1; i <= 4; ++i) s.Add(Step(i, i));
  // Full at 4: pairs (1,2) and (3,4) merge; each point now holds 2 steps.
  ASSERT_EQ(Steps(s), (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(s.stride(), 2);
  EXPECT_EQ(s.Points()[0].first_step(), 1);
  EXPECT_EQ(s.Points()[0].count(), 2);
  EXPECT_DOUBLE_EQ(s.Points()[0].loss(), 1.5);
  EXPECT_EQ(s.Points()[1].peak_memory_bytes(), 40);  // the highest, not the mean
  s.Add(Step(5, 5));                                 // pending: one of two steps
  EXPECT_EQ(Steps(s), (std::vector<int64_t>{2, 4, 5}));
  EXPECT_EQ(s.Points()[2].count(), 1);
  s.Add(Step(6, 6));
  s.Add(Step(7, 7));
  s.Add(Step(8, 8));  // (7,8) completes the 4th point: halve to (1-4), (5-8)
  EXPECT_EQ(Steps(s), (std::vector<int64_t>{4, 8}));
  EXPECT_EQ(s.stride(), 4);
  EXPECT_DOUBLE_EQ(s.Points()[1].loss(), 6.5);
  EXPECT_EQ(s.latest().step(), 8);
  EXPECT_EQ(s.latest().count(), 1);
}

TEST(TrainingSeries, ValidationLossIsTheMeanOfTheStepsThatEvaluated) {
  TrainingSeries s(2);
  s.Add(Step(1, 3.0));
  s.Add(Step(2, 2.0, /*val_loss=*/2.5));
  ASSERT_EQ(s.Points().size(), 1u);
  EXPECT_EQ(s.Points()[0].val_count(), 1);
  EXPECT_DOUBLE_EQ(s.Points()[0].val_loss(), 2.5);
  s.Add(Step(3, 1.0, 2.0));
  s.Add(Step(4, 1.0, 1.0));
  ASSERT_EQ(s.Points().size(), 1u);  // (1-2) + (3-4)
  EXPECT_EQ(s.Points()[0].val_count(), 3);
  EXPECT_DOUBLE_EQ(s.Points()[0].val_loss(), (2.5 + 2.0 + 1.0) / 3);
}

TEST(TrainingSeries, AMillionStepsStayWithinCapacityAndKeepTheirMeans) {
  constexpr int64_t kSteps = 1000000;
  constexpr int kCapacity = 2048;
  TrainingSeries s(kCapacity);
  double sum = 0;
  for (int64_t i = 1; i <= kSteps; ++i) {
    const double loss = 10.0 / std::sqrt(static_cast<double>(i));
    sum += loss;
    s.Add(Step(i, loss, i % 1000 == 0 ? loss : NAN));
  }
  const std::vector<MetricsPoint> points = s.Points();
  EXPECT_LE(points.size(), static_cast<size_t>(kCapacity));
  EXPECT_GE(points.size(), static_cast<size_t>(kCapacity / 2));
  // 2048 points of 256 steps filled at step 524288 and halved: 512 steps a point since, and
  // 10^6 / 512 = 1953 full points plus the pending one.
  EXPECT_EQ(s.stride(), 512);
  EXPECT_EQ(points.size(), 1954u);
  EXPECT_EQ(s.reported_steps(), kSteps);
  EXPECT_EQ(points.front().first_step(), 1);
  EXPECT_EQ(points.back().step(), kSteps);
  double weighted = 0;
  int64_t val_steps = 0;
  for (size_t i = 0; i < points.size(); ++i) {
    weighted += points[i].loss() * static_cast<double>(points[i].count());
    val_steps += points[i].val_count();
    if (i + 1 < points.size()) {
      EXPECT_EQ(points[i].count(), s.stride());
      EXPECT_EQ(points[i + 1].first_step(), points[i].step() + 1);  // no gap, no overlap
    }
  }
  EXPECT_NEAR(weighted, sum, 1e-6 * sum);
  EXPECT_EQ(val_steps, kSteps / 1000);
  // The curve's shape survives: the first point is the mean of steps 1..512.
  double first = 0;
  for (int i = 1; i <= 512; ++i) first += 10.0 / std::sqrt(static_cast<double>(i));
  EXPECT_NEAR(points.front().loss(), first / 512, 1e-9);
}

TEST(TrainingSeries, AnEarlierStepReplacesTheHistoryFromThatStepOn) {
  TrainingSeries s(8);
  for (int i = 1; i <= 6; ++i) s.Add(Step(i, i));
  MetricsPoint restarted = Step(4, 40);  // a restarted attempt resumed from step 3's checkpoint
  restarted.set_attempt(1);
  EXPECT_TRUE(s.Add(restarted));
  EXPECT_EQ(Steps(s), (std::vector<int64_t>{1, 2, 3, 4}));
  EXPECT_DOUBLE_EQ(s.Points().back().loss(), 40);
  EXPECT_EQ(s.latest().step(), 4);
}

// Issue #30: worker daemons send again what a restarted coordinator may have lost.
TEST(TrainingSeries, AStepOfTheSameAttemptSentAgainChangesNothingOrFillsItsHole) {
  TrainingSeries s(8);
  for (int i : {1, 2, 3, 6, 7}) s.Add(Step(i, i));  // 4 and 5 lost
  EXPECT_FALSE(s.Add(Step(2, 20)));                 // covered: nothing changes, nothing is cut
  EXPECT_FALSE(s.Add(Step(7, 70)));
  EXPECT_EQ(Steps(s), (std::vector<int64_t>{1, 2, 3, 6, 7}));
  EXPECT_DOUBLE_EQ(s.Points()[1].loss(), 2);
  EXPECT_TRUE(s.Add(Step(5, 5)));
  EXPECT_TRUE(s.Add(Step(4, 4)));
  EXPECT_EQ(Steps(s), (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(s.latest().step(), 7);
  EXPECT_EQ(s.reported_steps(), 7);
  EXPECT_TRUE(s.Add(Step(8, 8)));  // the 8th point: a halving, every pair of equal width
  EXPECT_EQ(s.stride(), 2);
  EXPECT_EQ(Steps(s), (std::vector<int64_t>{2, 4, 6, 8}));
  EXPECT_FALSE(s.Add(Step(3, 30)));  // inside a merged point
  EXPECT_EQ(s.reported_steps(), 8);
}

TEST(TrainingMetrics, DurableStepIsTheNewestDurableWritesStepAndDropsBelowAFilledHole) {
  TrainingMetrics m(64);
  for (int i = 1; i <= 3; ++i) m.Add("job-a", Step(i, i));
  EXPECT_EQ(m.DurableStep("job-a", 100), 0);  // nothing written yet
  EXPECT_EQ(m.DurableStep("job-b", 100), 0);  // unknown
  std::vector<JobMetricsRecord> dirty = m.TakeDirty(absl::Now(), absl::ZeroDuration());
  ASSERT_EQ(dirty.size(), 1u);
  m.Queued("job-a", 7);
  for (int i : {4, 6}) m.Add("job-a", Step(i, i));  // 5 lost on the way
  EXPECT_EQ(m.DurableStep("job-a", 6), 0);          // write 7 not durable yet
  EXPECT_EQ(m.DurableStep("job-a", 7), 3);
  EXPECT_FALSE(m.Add("job-a", Step(2, 2)));  // sent again: nothing to write
  ASSERT_EQ(m.TakeDirty(absl::Now(), absl::ZeroDuration()).size(), 1u);  // steps 4 and 6
  EXPECT_TRUE(m.TakeDirty(absl::Now(), absl::ZeroDuration()).empty());
  m.Queued("job-a", 9);
  EXPECT_EQ(m.DurableStep("job-a", 9), 6);
  // The hole at 5 filled: the stored record lacks it, so only 4 is durable until the next write.
  EXPECT_TRUE(m.Add("job-a", Step(5, 5)));
  EXPECT_EQ(m.DurableStep("job-a", 9), 4);
  ASSERT_EQ(m.TakeDirty(absl::Now(), absl::ZeroDuration()).size(), 1u);
  // A fill between the take and the queueing lowers that write's step too.
  EXPECT_TRUE(m.Add("job-a", Step(7, 7)));
  ASSERT_EQ(m.TakeDirty(absl::Now(), absl::ZeroDuration()).size(), 1u);
  MetricsPoint restarted = Step(3, 30);
  restarted.set_attempt(1);
  EXPECT_TRUE(m.Add("job-a", restarted));  // a later attempt from step 2's checkpoint
  m.Queued("job-a", 10);
  m.Queued("job-a", 11);
  EXPECT_EQ(m.DurableStep("job-a", 11), 2);
  // A series restored from the store is durable up to its newest step.
  TrainingMetrics restored(64);
  restored.Restore(dirty[0]);
  EXPECT_EQ(restored.DurableStep("job-a", 0), 3);
}

TEST(TrainingMetrics, AnEndedJobsSeriesIsWrittenAtOnceWhateverTheInterval) {
  TrainingMetrics m(64);
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  m.Add("job-a", Step(1, 1));
  m.Add("job-b", Step(1, 1));
  ASSERT_EQ(m.TakeDirty(t0, absl::Seconds(5)).size(), 2u);  // first writes: never written before
  m.Add("job-a", Step(2, 2));
  m.Add("job-b", Step(2, 2));
  EXPECT_TRUE(m.TakeDirty(t0 + absl::Seconds(1), absl::Seconds(5)).empty());  // both too recent
  m.Ended("job-a");
  m.Ended("job-unknown");  // no series: nothing
  const std::vector<JobMetricsRecord> due = m.TakeDirty(t0 + absl::Seconds(1), absl::Seconds(5));
  ASSERT_EQ(due.size(), 1u);
  EXPECT_EQ(due[0].job_id(), "job-a");
  EXPECT_TRUE(m.TakeDirty(t0 + absl::Seconds(2), absl::Seconds(5)).empty());  // clean now
}

TEST(TrainingSeries, RoundTripsThroughItsRecordAndShrinksToASmallerCapacity) {
  TrainingSeries s(8);
  for (int i = 1; i <= 11; ++i) s.Add(Step(i, i));
  const JobMetricsRecord r = s.ToRecord("job-a");
  EXPECT_EQ(r.job_id(), "job-a");
  const TrainingSeries back = TrainingSeries::FromRecord(r, 8);
  EXPECT_EQ(Steps(back), Steps(s));
  EXPECT_EQ(back.stride(), s.stride());
  EXPECT_EQ(back.reported_steps(), 11);
  EXPECT_EQ(back.latest().step(), 11);
  const TrainingSeries small = TrainingSeries::FromRecord(r, 2);
  EXPECT_LT(small.Points().size(), s.Points().size());
  EXPECT_EQ(small.reported_steps(), 11);
}

}  // namespace
}  // namespace shardline::coordinator
