#include "worker/rank_files.h"

#include "gtest/gtest.h"

namespace shardline::worker {
namespace {

TEST(RankFiles, FirstGenerationKeepsTheNamesToolsRead) {
  const RankFiles f = RankFilesFor("/w/jobs/job-1/attempt-2", 3, 0);
  EXPECT_EQ(f.spec, "/w/jobs/job-1/attempt-2/spec-rank-3.yaml");
  EXPECT_EQ(f.metrics, "/w/jobs/job-1/attempt-2/metrics-rank-3.jsonl");
  EXPECT_EQ(f.log, "/w/jobs/job-1/attempt-2/rank-3.log");
}

TEST(RankFiles, ReplacementGenerationsGetTheirOwnFiles) {
  const RankFiles f = RankFilesFor("/w/a", 3, 2);
  EXPECT_EQ(f.spec, "/w/a/spec-rank-3.gen2.yaml");
  EXPECT_EQ(f.metrics, "/w/a/metrics-rank-3.gen2.jsonl");
  EXPECT_EQ(f.log, "/w/a/rank-3.gen2.log");
  // No generation's file names are a prefix of another's (tests find a rank's process by
  // its --spec argument).
  EXPECT_EQ(RankFilesFor("/w/a", 3, 0).spec.find(".gen"), std::string::npos);
  EXPECT_NE(RankFilesFor("/w/a", 3, 1).log, RankFilesFor("/w/a", 3, 0).log);
}

}  // namespace
}  // namespace shardline::worker
