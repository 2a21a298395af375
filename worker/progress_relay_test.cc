#include "worker/progress_relay.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace shardline::worker {
namespace {

const ProgressRelay::Key kRank0{"job-1", 1, 0, 0};
const ProgressRelay::Key kRank1{"job-1", 1, 1, 0};

ProgressRelay::Report Step(const ProgressRelay::Key& key, int64_t step) {
  ProgressRelay::Report r;
  r.key = key;
  r.report.set_job_id(std::get<0>(key));
  r.report.set_rank(std::get<2>(key));
  r.report.set_step(step);
  r.credential = "secret";
  return r;
}

std::vector<int64_t> Steps(const std::vector<ProgressRelay::Report>& reports) {
  std::vector<int64_t> out;
  for (const auto& r : reports) out.push_back(r.report.step());
  return out;
}

// The coordinator acknowledges every report, with the job durable up to `durable`.
void AckAll(ProgressRelay& relay, std::vector<ProgressRelay::Report> reports, int64_t durable) {
  for (auto& r : reports) relay.Acknowledged(std::move(r), durable);
}

TEST(ProgressRelay, AcknowledgedReportsAboveTheDurableStepAreSentAgainAfterTheCoordinatorIsLost) {
  ProgressRelay relay(16);
  for (int64_t s = 1; s <= 4; ++s) relay.Add(Step(kRank0, s));
  std::vector<ProgressRelay::Report> round = relay.Take();
  EXPECT_EQ(Steps(round), (std::vector<int64_t>{1, 2, 3, 4}));
  AckAll(relay, std::move(round), /*durable=*/2);
  EXPECT_EQ(relay.Kept(kRank0), 2u);  // 3 and 4
  EXPECT_FALSE(relay.HasUnsent(kRank0));
  relay.Add(Step(kRank0, 5));
  EXPECT_EQ(Steps(relay.Take()), (std::vector<int64_t>{5}));  // not lost: only the fresh one
  relay.Acknowledged(Step(kRank0, 5), 2);
  relay.CoordinatorLost();  // a SIGKILL and restart: 3..5 may be gone
  relay.Add(Step(kRank0, 6));
  round = relay.Take();
  EXPECT_EQ(Steps(round), (std::vector<int64_t>{3, 4, 5, 6}));
  EXPECT_EQ(round[0].credential, "secret");
  AckAll(relay, std::move(round), /*durable=*/6);
  EXPECT_EQ(relay.Kept(kRank0), 0u);
  relay.CoordinatorLost();
  EXPECT_TRUE(relay.Take().empty());  // everything durable: nothing to send again
}

TEST(ProgressRelay, UnsentReportsGoFirstInOrderAndTheDurableStepIsTheJobsForEveryRank) {
  ProgressRelay relay(16);
  relay.Add(Step(kRank0, 1));
  relay.Add(Step(kRank1, 1));
  AckAll(relay, relay.Take(), 0);
  for (int64_t s = 2; s <= 3; ++s) relay.Add(Step(kRank0, s));
  std::vector<ProgressRelay::Report> round = relay.Take();
  for (auto& r : round) relay.Unsent(std::move(r));  // the coordinator is down
  relay.CoordinatorLost();
  EXPECT_TRUE(relay.HasUnsent(kRank0));
  relay.Add(Step(kRank0, 4));
  round = relay.Take();
  EXPECT_EQ(Steps(round), (std::vector<int64_t>{1, 2, 3, 4, 1}));  // rank 0's, then rank 1's
  AckAll(relay, std::move(round), 1);  // step 1 durable: rank 1's report goes too
  EXPECT_EQ(relay.Kept(kRank0), 3u);
  EXPECT_EQ(relay.Kept(kRank1), 0u);
  relay.Forget(kRank0);
  EXPECT_EQ(relay.Kept(kRank0), 0u);
}

TEST(ProgressRelay, KeepsAtMostItsBoundOfEachKindARankDroppingTheOldest) {
  ProgressRelay relay(3);
  for (int64_t s = 1; s <= 5; ++s) relay.Add(Step(kRank0, s));
  std::vector<ProgressRelay::Report> round = relay.Take();
  EXPECT_EQ(Steps(round), (std::vector<int64_t>{3, 4, 5}));
  AckAll(relay, std::move(round), 0);
  for (int64_t s = 6; s <= 7; ++s) relay.Add(Step(kRank0, s));
  AckAll(relay, relay.Take(), 0);
  EXPECT_EQ(relay.Kept(kRank0), 3u);
  relay.CoordinatorLost();
  EXPECT_EQ(Steps(relay.Take()), (std::vector<int64_t>{5, 6, 7}));
}

}  // namespace
}  // namespace shardline::worker
