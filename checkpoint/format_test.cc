// Torch-free pieces of the checkpoint format: CRC32C, step directories, retention, the shard
// writer + commit + reader round trip, safetensors files.
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/crc32c.h"
#include "checkpoint/format.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/shard_writer.h"
#include "common/testing/temp_dir.h"
#include "gtest/gtest.h"

namespace shardline::checkpoint {
namespace {

TEST(Crc32c, MatchesTheStandardCheckValue) {
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);  // RFC 3720's CRC32C check value.
  EXPECT_EQ(Crc32c("", 0), 0u);
  const std::string s = "the quick brown fox jumps over the lazy dog, twice over";
  EXPECT_EQ(Crc32cExtend(Crc32c(s.data(), 13), s.data() + 13, s.size() - 13),
            Crc32c(s.data(), s.size()));
}

TEST(Crc32c, HardwareAndTableVersionsAgree) {
  std::string data(100003, '\0');
  uint32_t x = 12345;
  for (char& c : data) c = static_cast<char>((x = x * 1103515245u + 12345u) >> 24);
  for (size_t n : {0, 1, 7, 8, 9, 63, 4096, 100003}) {
    EXPECT_EQ(Crc32c(data.data(), n), Crc32cExtendPortable(0, data.data(), n)) << n;
  }
  EXPECT_EQ(Crc32cExtendPortable(0, "123456789", 9), 0xE3069283u);
}

TEST(StepDirs, ParseOnlyStepNames) {
  int64_t step = 0;
  EXPECT_TRUE(ParseStepDirName("step_120", &step));
  EXPECT_EQ(step, 120);
  EXPECT_FALSE(ParseStepDirName("step_", &step));
  EXPECT_FALSE(ParseStepDirName("step_12x", &step));
  EXPECT_FALSE(ParseStepDirName("other", &step));
  EXPECT_EQ(StepDirName(7), "step_7");
  EXPECT_EQ(DataFileName(3), "shard_00003.bin");
}

// Writes a two-shard checkpoint of one 2x3 tensor "w" (values 0..5) at `step`.
void WriteTiny(const std::string& root, int64_t step) {
  const std::string dir = StepDir(root, step);
  const float v[6] = {0, 1, 2, 3, 4, 5};
  ASSERT_TRUE(WriteShard(dir, 0, "id", {{"w", {2, 3}, 0, 4, v}}).ok());
  ASSERT_TRUE(WriteShard(dir, 1, "id", {{"w", {2, 3}, 4, 6, v + 4}}).ok());
  CheckpointMeta meta;
  meta.step = step;
  meta.world_size = 2;
  meta.shard_degree = 2;
  ASSERT_TRUE(CommitCheckpoint(dir, 2, "id", meta, absl::Seconds(5)).ok());
}

TEST(ShardWriter, RoundTripThroughTheReader) {
  const std::string root = FreshTempDir("roundtrip");
  WriteTiny(root, 3);
  auto r = CheckpointReader::Open(root, -1);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)->meta().step, 3);
  ASSERT_TRUE((*r)->VerifyAll().ok());
  float out[4] = {};
  ASSERT_TRUE((*r)->ReadElements("w", 2, 6, out).ok());  // Spans both files.
  EXPECT_EQ(out[0], 2);
  EXPECT_EQ(out[3], 5);
  EXPECT_FALSE(std::filesystem::exists(StepDir(root, 3) + "/shard_00000.index.json"));
}

TEST(ShardWriter, CommitWaitsForEveryShardAndNamesTheMissingOne) {
  const std::string root = FreshTempDir("missing_writer");
  const std::string dir = StepDir(root, 1);
  const float v[2] = {1, 2};
  ASSERT_TRUE(WriteShard(dir, 0, "new", {{"w", {2}, 0, 1, v}}).ok());
  // A leftover index of an interrupted save of the same step must not be merged.
  ASSERT_TRUE(WriteShard(dir, 1, "old", {{"w", {2}, 1, 2, v + 1}}).ok());
  absl::Status s = CommitCheckpoint(dir, 2, "new", CheckpointMeta(), absl::Milliseconds(50));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "shard_00001.index.json")) << s;
  auto steps = ListCommittedSteps(root);
  ASSERT_TRUE(steps.ok());
  EXPECT_TRUE(steps->empty());
}

TEST(ShardWriter, CommitWaitingForWritersCanBeCancelled) {
  const std::string root = FreshTempDir("cancel");
  const std::string dir = StepDir(root, 1);
  const float v[1] = {1};
  ASSERT_TRUE(WriteShard(dir, 0, "id", {{"w", {2}, 0, 1, v}}).ok());
  std::atomic<bool> cancel{true};
  const absl::Time start = absl::Now();
  absl::Status s = CommitCheckpoint(dir, 2, "id", CheckpointMeta(), absl::Minutes(10), &cancel);
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "shard_00001.index.json")) << s;
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST(Retention, KeepsTheLastKAndRemovesSupersededPartials) {
  const std::string root = FreshTempDir("retention");
  for (int64_t step : {1, 2, 3, 5}) WriteTiny(root, step);
  std::filesystem::create_directories(StepDir(root, 4));  // Interrupted save, older than 5.
  std::filesystem::create_directories(StepDir(root, 6));  // In progress, newer: kept.
  auto deleted = ApplyRetention(root, 2);
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ(*deleted, (std::vector<int64_t>{1, 2, 4}));
  auto steps = ListCommittedSteps(root);
  EXPECT_EQ(*steps, (std::vector<int64_t>{3, 5}));
  EXPECT_TRUE(std::filesystem::exists(StepDir(root, 6)));
  // keep_last 0 keeps all; the newest committed is never deleted.
  EXPECT_TRUE(ApplyRetention(root, 0)->empty());
  EXPECT_EQ(*ApplyRetention(root, 1), (std::vector<int64_t>{3}));
  EXPECT_EQ(*ListCommittedSteps(root), (std::vector<int64_t>{5}));
}

TEST(Retention, NeverTouchesStepsAboveTheAcknowledgedOne) {
  // Issue #21 item 2: retention runs after the coordinator acknowledged step up_to. Newer
  // committed steps (not acknowledged yet) count for nothing and stay, and so does up_to itself.
  const std::string root = FreshTempDir("retention_bound");
  for (int64_t step : {3, 6, 9, 12}) WriteTiny(root, step);
  std::filesystem::create_directories(StepDir(root, 5));   // Interrupted, older than 6: removed.
  std::filesystem::create_directories(StepDir(root, 10));  // Above the bound: kept.
  auto deleted = ApplyRetention(root, 1, /*up_to=*/6);
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ(*deleted, (std::vector<int64_t>{3, 5}));
  EXPECT_EQ(*ListCommittedSteps(root), (std::vector<int64_t>{6, 9, 12}));
  EXPECT_TRUE(std::filesystem::exists(StepDir(root, 10)));
  // Nothing committed at or below the bound: nothing is deleted.
  EXPECT_TRUE(ApplyRetention(root, 1, /*up_to=*/2)->empty());
  EXPECT_EQ(*ApplyRetention(root, 1, /*up_to=*/12), (std::vector<int64_t>{6, 9, 10}));
  EXPECT_EQ(*ListCommittedSteps(root), (std::vector<int64_t>{12}));
}

TEST(ResolveStep, NamedStepMustBeCommitted) {
  const std::string root = FreshTempDir("resolve");
  EXPECT_EQ(ResolveStep(root, -1).status().code(), absl::StatusCode::kNotFound);
  WriteTiny(root, 2);
  EXPECT_EQ(*ResolveStep(root, -1), 2);
  EXPECT_EQ(*ResolveStep(root, 2), 2);
  absl::Status s = ResolveStep(root, 3).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(s.message(), "step_3")) << s;
}

TEST(Safetensors, ExportOfACheckpointReadsBack) {
  const std::string root = FreshTempDir("st");
  WriteTiny(root, 4);
  const std::string out = root + "/model.safetensors";
  ASSERT_TRUE(ExportSafetensors(root, -1, out).ok());
  auto t = ReadSafetensors(out);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->size(), 1u);
  EXPECT_EQ((*t)[0].name, "w");
  EXPECT_EQ((*t)[0].dtype, "F32");
  EXPECT_EQ((*t)[0].shape, (std::vector<int64_t>{2, 3}));
  ASSERT_EQ((*t)[0].data.size(), 24u);
  float v[6];
  std::memcpy(v, (*t)[0].data.data(), 24);
  EXPECT_EQ(v[5], 5);
  const std::string out2 = root + "/model2.safetensors";
  ASSERT_TRUE(ExportSafetensorsFromStepDir(StepDir(root, 4), out2).ok());
  auto t2 = ReadSafetensors(out2);
  ASSERT_TRUE(t2.ok()) << t2.status();
  EXPECT_EQ((*t2)[0].data, (*t)[0].data);
  absl::Status missing = ExportSafetensorsFromStepDir(StepDir(root, 5), out2);
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound) << missing;
}

TEST(Safetensors, MalformedFileIsDataLoss) {
  const std::string root = FreshTempDir("st_bad");
  const std::string path = root + "/bad.safetensors";
  const std::string bytes("\x10\0\0\0\0\0\0\0{not json}      ", 24);
  std::ofstream(path, std::ios::binary) << bytes;
  absl::Status s = ReadSafetensors(path).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "not JSON")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), path)) << s;
  EXPECT_EQ(ReadSafetensors(root + "/none").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace shardline::checkpoint
