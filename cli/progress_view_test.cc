#include "cli/progress_view.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace shardline::cli {
namespace {

TEST(ProgressView, RunningLineShowsStepLossRateAndEta) {
  JobStatus s;
  s.set_state(RUNNING);
  s.set_step(120);
  s.set_total_steps(400);
  s.set_loss(2.31414);
  s.set_tokens_per_s(12400);
  s.set_eta_s(65);
  s.set_attempt(1);
  EXPECT_EQ(ProgressLine(s, 10),
            "RUNNING   step 120/400 [###.......]  30%  loss 2.3141  12.4k tok/s  ETA 1m05s");
}

TEST(ProgressView, RestartedJobShowsAttempt) {
  JobStatus s;
  s.set_state(SUCCEEDED);
  s.set_step(400);
  s.set_total_steps(400);
  s.set_loss(1.5);
  s.set_tokens_per_s(900);
  s.set_attempt(2);
  const std::string line = ProgressLine(s, 4);
  EXPECT_TRUE(absl::StartsWith(line, "SUCCEEDED step 400/400 [####] 100%")) << line;
  EXPECT_TRUE(absl::StrContains(line, "900 tok/s")) << line;
  EXPECT_TRUE(absl::EndsWith(line, "attempt 2")) << line;
  EXPECT_FALSE(absl::StrContains(line, "ETA")) << line;
}

TEST(ProgressView, PendingJobHasNoLoss) {
  JobStatus s;
  s.set_state(PENDING);
  s.set_total_steps(50);
  EXPECT_EQ(ProgressLine(s, 0), "PENDING   step 0/50");
}

TEST(ProgressView, Formatting) {
  EXPECT_EQ(FormatDuration(45), "45s");
  EXPECT_EQ(FormatDuration(187), "3m07s");
  EXPECT_EQ(FormatDuration(7500), "2h05m");
  EXPECT_EQ(FormatDuration(-1), "--");
  EXPECT_EQ(FormatRate(3.1e6), "3.10M tok/s");
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(3 * 1048576), "3.0 MiB");
}

TEST(ProgressView, JobListColumnsLineUpWithSixteenCharacterIdsAndLongNames) {
  std::vector<JobStatus> jobs(2);
  jobs[0].set_job_id("job-mx5vsm5eqkzq");  // what the coordinator issues: 16 characters
  jobs[0].mutable_spec()->set_name("tiny-gpt-shakespeare");
  jobs[0].set_owner("admin");
  jobs[0].set_state(SUCCEEDED);
  jobs[1].set_job_id("job-1");
  jobs[1].mutable_spec()->set_name("a-name-longer-than-twenty-four-characters");
  jobs[1].set_state(PENDING);
  const std::vector<std::string> lines = absl::StrSplit(JobListTable(jobs), '\n');
  ASSERT_EQ(lines.size(), 4u);  // header, two jobs, the empty string after the last newline
  EXPECT_EQ(lines[3], "");
  // Every column starts where its header does.
  for (const char* header : {"NAME", "OWNER", "PROGRESS"}) {
    const size_t at = lines[0].find(header);
    ASSERT_NE(at, std::string::npos) << header;
    for (int i = 1; i <= 2; ++i) {
      EXPECT_NE(lines[i][at], ' ') << header << " in line " << i << ": " << lines[i];
      EXPECT_EQ(lines[i][at - 1], ' ') << header << " in line " << i << ": " << lines[i];
    }
  }
  EXPECT_TRUE(absl::StartsWith(lines[1], "job-mx5vsm5eqkzq  tiny-gpt-shakespeare ")) << lines[1];
  EXPECT_TRUE(absl::StrContains(lines[2], " -      PENDING")) << lines[2];  // no owner: "-"
}

TEST(ProgressView, StatusBlockListsPlacementAndEvents) {
  JobStatus s;
  s.set_job_id("job-7");
  s.mutable_spec()->set_name("tiny");
  s.set_state(FAILED);
  s.set_message("rank 2 exited with code 3");
  s.set_owner("alice");
  RankPlacement* p = s.add_placement();
  p->set_rank(2);
  p->set_node_name("node-b");
  JobEvent* e = s.add_events();
  e->set_kind("RANK_FAILED");
  e->set_message("rank 2 exited with code 3");
  const std::string block = StatusBlock(s);
  EXPECT_TRUE(absl::StrContains(block, "state      FAILED: rank 2 exited with code 3")) << block;
  EXPECT_TRUE(absl::StrContains(block, "rank 2   node node-b")) << block;
  EXPECT_TRUE(absl::StrContains(block, "owner      alice\n")) << block;
  EXPECT_TRUE(absl::StrContains(block, "RANK_FAILED")) << block;
  EXPECT_FALSE(absl::StrContains(block, "dropped")) << block;
  s.set_events_dropped(7);
  EXPECT_TRUE(absl::StrContains(StatusBlock(s),
                                "events\n  (7 older events dropped: --max_events_per_job)\n"))
      << StatusBlock(s);
}

TEST(ProgressView, StatusBlockOfAFaultTolerantJobShowsTheLiveReplicaGroupsAndGenerations) {
  JobStatus s;
  s.set_job_id("job-8");
  s.set_state(RUNNING);
  s.set_world_size(6);
  s.mutable_spec()->mutable_fault_tolerance()->set_mode(FaultToleranceSpec::REPLICA_GROUPS);
  s.mutable_spec()->mutable_fault_tolerance()->set_min_replicas(2);
  for (int r = 0; r < 6; ++r) {
    RankPlacement* p = s.add_placement();
    p->set_rank(r);
    p->set_node_name("node-" + std::to_string(r / 2));
    p->set_shard_group(r / 2);
    p->set_replicate_group(r % 2);
    if (r / 2 == 1) p->set_generation(1);
  }
  s.add_live_replica_groups(0);
  s.add_live_replica_groups(2);
  s.set_membership_epoch(1);
  const std::string block = StatusBlock(s);
  EXPECT_TRUE(absl::StrContains(
      block, "replicas   2 of 3 shard groups live [0, 2]  (membership epoch 1, min_replicas 2)\n"))
      << block;
  EXPECT_TRUE(absl::StrContains(block, "shard group 1  replicate group 0  generation 1\n"))
      << block;
  EXPECT_TRUE(absl::StrContains(block, "shard group 0  replicate group 0\n")) << block;
  // A job without fault tolerance has no replicas line.
  s.mutable_spec()->clear_fault_tolerance();
  EXPECT_FALSE(absl::StrContains(StatusBlock(s), "replicas")) << StatusBlock(s);
}

}  // namespace
}  // namespace shardline::cli
