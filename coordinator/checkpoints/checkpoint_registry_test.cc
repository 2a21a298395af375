#include "coordinator/checkpoints/checkpoint_registry.h"

#include "gtest/gtest.h"

namespace shardline::coordinator {
namespace {

const absl::Time kNow = absl::FromUnixSeconds(1700000000);
const CheckpointRegistry::Layout kLayout{4, "FULL_SHARD", 4};

CheckpointReport Rep(int64_t step, std::vector<std::string> files, bool manifest = false,
                     int expected = 2) {
  CheckpointReport r;
  r.set_job_id("job-1");
  r.set_step(step);
  r.set_path("/ckpt/job-1/step_" + std::to_string(step));
  for (auto& f : files) r.add_files(f);
  r.set_manifest_committed(manifest);
  r.set_expected_files(expected);
  return r;
}

TEST(CheckpointRegistry, CommittedOnlyWhenAllFilesAndManifestReported) {
  CheckpointRegistry reg;
  bool committed = false;
  auto r = reg.Report(Rep(10, {"shard_00000.bin"}), kLayout, kNow, &committed);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(committed);
  // Manifest before the last shard: still not committed.
  r = reg.Report(Rep(10, {"MANIFEST.json"}, true), kLayout, kNow, &committed);
  EXPECT_FALSE(committed);
  EXPECT_FALSE(reg.Get("job-1", 10)->committed());
  EXPECT_EQ(reg.LatestCommitted("job-1"), 0);
  // A repeated report changes nothing.
  r = reg.Report(Rep(10, {"shard_00000.bin"}), kLayout, kNow, &committed);
  EXPECT_FALSE(committed);
  r = reg.Report(Rep(10, {"shard_00001.bin"}), kLayout, kNow, &committed);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(committed);
  EXPECT_TRUE(r->info().committed());
  EXPECT_EQ(r->info().world_size(), 4);
  EXPECT_EQ(r->info().sharding_strategy(), "FULL_SHARD");
  EXPECT_EQ(reg.LatestCommitted("job-1"), 10);
  r = reg.Report(Rep(10, {"shard_00001.bin"}), kLayout, kNow, &committed);
  EXPECT_FALSE(committed);  // only the first commit says so
}

TEST(CheckpointRegistry, CommitReportNamingEveryDataFileCommitsAloneAndRepeatsHarmlessly) {
  // Issue #21 item 2: rank 0's commit report lists MANIFEST.json and every data file, so it
  // commits the step even when the writers' best-effort reports were lost in an outage; the
  // retried report (its first answer lost) and late writer reports change nothing.
  CheckpointRegistry reg;
  bool committed = false;
  const CheckpointReport commit =
      Rep(12, {"MANIFEST.json", "shard_00000.bin", "shard_00001.bin"}, true);
  auto r = reg.Report(commit, kLayout, kNow, &committed);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(committed);
  EXPECT_EQ(reg.LatestCommitted("job-1"), 12);
  r = reg.Report(commit, kLayout, kNow, &committed);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(committed);
  r = reg.Report(Rep(12, {"shard_00001.bin"}), kLayout, kNow, &committed);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->files_size(), 2);
}

TEST(CheckpointRegistry, TheCommitReportsSizeIsTheCheckpointsSize) {
  CheckpointRegistry reg;
  bool committed = false;
  CheckpointReport writer = Rep(12, {"shard_00000.bin"});
  writer.set_size_bytes(999);  // Only the commit report's size counts.
  ASSERT_TRUE(reg.Report(writer, kLayout, kNow, &committed).ok());
  EXPECT_EQ(reg.Get("job-1", 12)->size_bytes(), 0);
  CheckpointReport commit = Rep(12, {"MANIFEST.json", "shard_00000.bin", "shard_00001.bin"}, true);
  commit.set_size_bytes(123456);
  auto r = reg.Report(commit, kLayout, kNow, &committed);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->info().size_bytes(), 123456);
  EXPECT_EQ(reg.List("job-1").at(0).size_bytes(), 123456);
}

TEST(CheckpointRegistry, RejectsRelativePathsFileNamesOutsideTheStepAndNegativeCounts) {
  CheckpointRegistry reg;
  bool c;
  CheckpointReport relative = Rep(5, {"a"});
  relative.set_path("ckpt/step_5");
  auto r = reg.Report(relative, kLayout, kNow, &c);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("path must be absolute, got \"ckpt/step_5\""),
            std::string::npos)
      << r.status();
  for (const std::string& bad : {"", ".", "..", "../../etc/passwd", "sub/shard.bin"}) {
    r = reg.Report(Rep(5, {"ok.bin", bad}), kLayout, kNow, &c);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find("file \"" + bad + "\" is not a file name"),
              std::string::npos)
        << r.status();
  }
  r = reg.Report(Rep(5, {"a"}, false, -1), kLayout, kNow, &c);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("expected_files must be >= 0, got -1"), std::string::npos);
  CheckpointReport negative_size = Rep(5, {"a"}, true);
  negative_size.set_size_bytes(-5);
  r = reg.Report(negative_size, kLayout, kNow, &c);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("size_bytes must be >= 0, got -5"), std::string::npos);
  // Nothing of the refused reports was recorded.
  EXPECT_TRUE(reg.List("job-1").empty());
}

TEST(CheckpointRegistry, RejectsInconsistentReports) {
  CheckpointRegistry reg;
  bool c;
  CheckpointReport other = Rep(5, {"a"});
  ASSERT_TRUE(reg.Report(other, kLayout, kNow, &c).ok());
  other.set_path("/elsewhere");
  auto r = reg.Report(other, kLayout, kNow, &c);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("differs"), std::string::npos);
  EXPECT_EQ(reg.Report(Rep(-1, {"a"}), kLayout, kNow, &c).status().code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(reg.Report(Rep(5, {"b", "MANIFEST.json"}, true), kLayout, kNow, &c).ok());
  ASSERT_TRUE(c);
  EXPECT_EQ(reg.Report(Rep(5, {"c"}), kLayout, kNow, &c).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(CheckpointRegistry, ListGetAndRetention) {
  CheckpointRegistry reg;
  bool c;
  for (int64_t step : {10, 20, 30, 40}) {
    ASSERT_TRUE(reg.Report(Rep(step, {"a", "b", "MANIFEST.json"}, true), kLayout, kNow, &c).ok());
  }
  ASSERT_TRUE(reg.Report(Rep(15, {"a"}), kLayout, kNow, &c).ok());  // never finished
  ASSERT_TRUE(reg.Report(Rep(45, {"a"}), kLayout, kNow, &c).ok());  // in progress
  EXPECT_EQ(reg.List("job-1").size(), 6u);
  EXPECT_TRUE(reg.List("job-2").empty());
  EXPECT_EQ(reg.Get("job-1", 99).status().code(), absl::StatusCode::kNotFound);
  auto removed = reg.ApplyRetention("job-1", 2);
  ASSERT_EQ(removed.size(), 3u);  // 10, 15, 20
  EXPECT_EQ(removed[0].second, 10);
  EXPECT_EQ(removed[1].second, 15);
  EXPECT_EQ(removed[2].second, 20);
  auto left = reg.List("job-1");
  ASSERT_EQ(left.size(), 3u);
  EXPECT_EQ(left[0].step(), 30);
  EXPECT_EQ(left[2].step(), 45);
  EXPECT_TRUE(reg.ApplyRetention("job-1", 0).empty());
  EXPECT_EQ(reg.LatestCommitted("job-1"), 40);
}

// #31 item 3: who may continue which checkpoint is decided by these lookups.
TEST(CheckpointRegistry, PathsNameTheJobOfACommittedCheckpointOrOfTheDirectoryHoldingThem) {
  CheckpointRegistry reg;
  bool committed = false;
  ASSERT_TRUE(reg.Report(Rep(4, {"shard_00000.bin", "shard_00001.bin", "MANIFEST.json"}, true),
                         kLayout, kNow, &committed)
                  .ok());
  ASSERT_TRUE(committed);
  ASSERT_TRUE(reg.Report(Rep(6, {"shard_00000.bin"}), kLayout, kNow, &committed).ok());
  // A committed step directory, with a trailing slash or "." too, and the job's directory.
  EXPECT_EQ(reg.JobOfCommittedCheckpoint("/ckpt/job-1/step_4"), "job-1");
  EXPECT_EQ(reg.JobOfCommittedCheckpoint("/ckpt/job-1/./step_4/"), "job-1");
  EXPECT_EQ(reg.JobOfCommittedCheckpoint("/ckpt/job-1"), "job-1");
  // Not committed, not recorded, another folder.
  EXPECT_EQ(reg.JobOfCommittedCheckpoint("/ckpt/job-1/step_6"), "");
  EXPECT_EQ(reg.JobOfCommittedCheckpoint("/ckpt/job-1/step_8"), "");
  EXPECT_EQ(reg.JobOfCommittedCheckpoint("/ckpt"), "");
  EXPECT_EQ(reg.JobOfCommittedCheckpoint("/ckpt/job-10/step_4"), "");
  // Files in the job's directory (an export next to its steps), not its siblings'.
  EXPECT_EQ(reg.JobWhoseDirectoryHolds("/ckpt/job-1/export.safetensors"), "job-1");
  EXPECT_EQ(reg.JobWhoseDirectoryHolds("/ckpt/job-1/step_4/shard_00000.bin"), "job-1");
  EXPECT_EQ(reg.JobWhoseDirectoryHolds("/ckpt/job-10/w.safetensors"), "");
  EXPECT_EQ(reg.JobWhoseDirectoryHolds("/models/w.safetensors"), "");
}

TEST(CheckpointRegistry, MaxRecordsCapsKeepLastZeroAndOvertakenSavesAreRetired) {
  CheckpointRegistry reg;
  bool c;
  ASSERT_TRUE(reg.Report(Rep(5, {"a"}), kLayout, kNow, &c).ok());  // a save that never finished
  for (int64_t step : {10, 20, 30, 40}) {
    ASSERT_TRUE(reg.Report(Rep(step, {"a", "b", "MANIFEST.json"}, true), kLayout, kNow, &c).ok());
  }
  ASSERT_TRUE(reg.Report(Rep(35, {"a"}), kLayout, kNow, &c).ok());  // overtaken by 40's commit
  ASSERT_TRUE(reg.Report(Rep(45, {"a"}), kLayout, kNow, &c).ok());  // in progress
  // keep_last 0 (the spec keeps all) no longer means unbounded: --max_checkpoints_per_job 2.
  auto removed = reg.ApplyRetention("job-1", 0, /*committed_step=*/40, /*max_records=*/2);
  std::vector<int64_t> steps;
  for (const auto& [job, step] : removed) steps.push_back(step);
  EXPECT_EQ(steps, (std::vector<int64_t>{5, 10, 20, 35}));
  auto left = reg.List("job-1");
  ASSERT_EQ(left.size(), 3u);
  EXPECT_EQ(left[0].step(), 30);
  EXPECT_EQ(left[1].step(), 40);
  EXPECT_EQ(left[2].step(), 45);  // newer than the commit: still being written
}

TEST(CheckpointRegistry, StepsThatNeverCommitCannotGrowTheRegistryPastTheBound) {
  CheckpointRegistry reg;
  bool c;
  ASSERT_TRUE(reg.Report(Rep(10, {"a", "b", "MANIFEST.json"}, true), kLayout, kNow, &c).ok());
  for (int64_t step = 11; step <= 1000; ++step) {
    ASSERT_TRUE(reg.Report(Rep(step, {"a"}), kLayout, kNow, &c).ok());
    reg.BoundRecords("job-1", step, /*max_records=*/4);
  }
  auto left = reg.List("job-1");
  ASSERT_EQ(left.size(), 4u);
  EXPECT_EQ(left[0].step(), 10);  // the newest committed is never evicted
  EXPECT_TRUE(left[0].committed());
  EXPECT_EQ(left[3].step(), 1000);
  EXPECT_EQ(reg.LatestCommitted("job-1"), 10);
  EXPECT_TRUE(reg.BoundRecords("job-1", 1000, 0).empty());  // 0: no bound
}

TEST(CheckpointRegistry, ResumeStepIsTheNewestCommittedElseTheSpecsForAFirstAttempt) {
  CheckpointRegistry reg;
  JobStatus st;
  st.set_job_id("job-1");
  st.set_attempt(1);
  EXPECT_EQ(reg.ResumeStep(st), 0);  // fresh
  st.mutable_spec()->mutable_checkpoint()->set_resume_step(-1);
  EXPECT_EQ(reg.ResumeStep(st), 0);  // "latest": the trainer resolves it
  st.mutable_spec()->mutable_checkpoint()->set_resume_step(40);
  EXPECT_EQ(reg.ResumeStep(st), 40);
  st.set_attempt(2);
  EXPECT_EQ(reg.ResumeStep(st), 0);  // a restart resumes only from what this job committed
  bool committed = false;
  ASSERT_TRUE(reg.Report(Rep(10, {"shard_00000.bin", "shard_00001.bin", "MANIFEST.json"}, true),
                         kLayout, kNow, &committed)
                  .ok());
  ASSERT_TRUE(committed);
  EXPECT_EQ(reg.ResumeStep(st), 10);
  st.set_attempt(1);
  EXPECT_EQ(reg.ResumeStep(st), 10);
}

}  // namespace
}  // namespace shardline::coordinator
