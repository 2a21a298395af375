// Durable names: the helper's error paths, and that every commit step of a checkpoint save and
// of a safetensors export syncs the directory whose entries it changed (seen through the
// FsyncDir test hook).
#include "checkpoint/durable_file.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "checkpoint/format.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/shard_writer.h"
#include "common/testing/temp_dir.h"
#include "gtest/gtest.h"

namespace shardline::checkpoint {
namespace {

// Records every directory FsyncDir syncs while it lives.
class SyncLog {
 public:
  SyncLog() {
    SetFsyncDirHookForTesting([this](const std::string& dir) {
      absl::MutexLock lock(&mu_);
      dirs_.push_back(dir);
    });
  }
  ~SyncLog() { SetFsyncDirHookForTesting(nullptr); }
  std::vector<std::string> Take() {
    absl::MutexLock lock(&mu_);
    return std::move(dirs_);
  }

 private:
  absl::Mutex mu_;
  std::vector<std::string> dirs_;
};

TEST(FsyncDir, MissingDirectoryIsInternalNamingIt) {
  const std::string missing = FreshTempDir("durable_missing") + "/no/such/dir";
  absl::Status s = FsyncDir(missing);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), absl::StrCat("open directory ", missing, ": "))) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "No such file or directory")) << s;
}

TEST(MakeDirsDurable, SyncsTheParentOfEveryDirectoryItCreates) {
  const std::string root = FreshTempDir("durable_mkdirs");
  SyncLog log;
  ASSERT_TRUE(MakeDirsDurable(root + "/a/b/").ok());
  EXPECT_TRUE(std::filesystem::is_directory(root + "/a/b"));
  EXPECT_EQ(log.Take(), (std::vector<std::string>{root, root + "/a"}));
  ASSERT_TRUE(MakeDirsDurable(root + "/a/b").ok());  // Exists: nothing to create.
  EXPECT_TRUE(log.Take().empty());
}

TEST(MakeDirsDurable, PathUnderARegularFileIsInternalNamingIt) {
  const std::string root = FreshTempDir("durable_file_in_way");
  std::ofstream(root + "/f") << "x";
  absl::Status s = MakeDirsDurable(root + "/f/step_1");
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), root + "/f is not a directory")) << s;
}

TEST(RenameDurable, MissingSourceIsInternalNamingBothPaths) {
  const std::string root = FreshTempDir("durable_rename");
  SyncLog log;
  absl::Status s = RenameDurable(root + "/from", root + "/to");
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_TRUE(absl::StrContains(
      s.message(), absl::StrCat("rename ", root, "/from to ", root, "/to: No such file")))
      << s;
  EXPECT_TRUE(log.Take().empty());
  std::ofstream(root + "/from") << "x";
  ASSERT_TRUE(RenameDurable(root + "/from", root + "/to").ok());
  EXPECT_EQ(log.Take(), (std::vector<std::string>{root}));
}

TEST(WriteFileAtomic, SyncsTheDirectoryAndLeavesNoTempFileOnFailure) {
  const std::string root = FreshTempDir("durable_atomic");
  SyncLog log;
  ASSERT_TRUE(WriteFileAtomic(root + "/x.json", "{}").ok());
  EXPECT_EQ(log.Take(), (std::vector<std::string>{root}));
  // A directory in the way: the rename fails and the temp file is removed.
  std::filesystem::create_directories(root + "/d/inner");
  absl::Status s = WriteFileAtomic(root + "/d", "{}");
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), absl::StrCat("to ", root, "/d: "))) << s;
  int entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(root)) entries += e.exists();
  EXPECT_EQ(entries, 2);  // x.json and d.
}

// A crash after step_N/ is created, or after the commit, must not lose the name: the save syncs
// the root after creating step_N/ and again after the commit, and the step directory after each
// file it renames into place.
TEST(DurableNames, CheckpointSaveSyncsTheRootAndTheStepDirectoryAtEachCommitPoint) {
  const std::string root = FreshTempDir("durable_save") + "/ckpt";
  const std::string step = StepDir(root, 5);
  const float v[4] = {1, 2, 3, 4};
  SyncLog log;
  ASSERT_TRUE(WriteShard(step, 0, "id", {{"w", {4}, 0, 4, v}}).ok());
  // The root's parent (root is created), the root (step_5 is created), the step directory after
  // the data file's rename and after the index's.
  EXPECT_EQ(log.Take(), (std::vector<std::string>{ParentDir(root), root, step, step}));
  CheckpointMeta meta;
  meta.step = 5;
  ASSERT_TRUE(CommitCheckpoint(step, 1, "id", meta, absl::Seconds(5)).ok());
  // The manifest's rename (the commit point), then the root again.
  EXPECT_EQ(log.Take(), (std::vector<std::string>{step, root}));
}

TEST(DurableNames, SafetensorsExportSyncsTheTargetDirectory) {
  const std::string dir = FreshTempDir("durable_export");
  SyncLog log;
  ASSERT_TRUE(WriteSafetensors(dir + "/m.safetensors", {{"w", "F32", {1}, "abcd"}}, {}).ok());
  EXPECT_EQ(log.Take(), (std::vector<std::string>{dir}));
}

}  // namespace
}  // namespace shardline::checkpoint
