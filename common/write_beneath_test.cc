#include "common/write_beneath.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shardline {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class WriteBeneathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = std::string(std::getenv("TEST_TMPDIR")) + "/write_beneath";
    fs::remove_all(base_);
    fs::create_directories(base_ + "/ckpt/job-1");
    fs::create_directories(base_ + "/outside");
    std::ofstream(base_ + "/outside/keep.txt") << "keep";
    root_ = base_ + "/ckpt";
    SetWriteRoots({root_});
  }
  void TearDown() override { SetWriteRoots({}); }

  static absl::Status Write(const std::string& path, const std::string& text) {
    absl::StatusOr<int> fd = OpenForWrite(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (!fd.ok()) return fd.status();
    const bool ok = write(*fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
    close(*fd);
    return ok ? absl::OkStatus() : absl::InternalError("short write");
  }
  static std::string Read(const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  bool OutsideUntouched() const {
    return std::distance(fs::directory_iterator(base_ + "/outside"), fs::directory_iterator()) ==
               1 &&
           Read(base_ + "/outside/keep.txt") == "keep";
  }

  std::string base_;
  std::string root_;
};

TEST_F(WriteBeneathTest, WritesRenamesAndRemovesBeneathTheRoot) {
  ASSERT_TRUE(MakeDirBeneath(root_ + "/job-1/step_2", 0755).ok());
  ASSERT_TRUE(MakeDirBeneath(root_ + "/job-1/step_2", 0755).ok());  // existing: fine
  ASSERT_TRUE(Write(root_ + "/job-1/step_2/shard.tmp", "bytes").ok());
  ASSERT_TRUE(RenameBeneath(root_ + "/job-1/step_2/shard.tmp", root_ + "/job-1/step_2/shard").ok());
  EXPECT_EQ(Read(root_ + "/job-1/step_2/shard"), "bytes");
  absl::StatusOr<int> dir = OpenDirBeneath(root_ + "/job-1/step_2");
  ASSERT_TRUE(dir.ok()) << dir.status();
  EXPECT_EQ(fsync(*dir), 0);
  close(*dir);
  absl::StatusOr<int> root = OpenDirBeneath(root_);  // the root itself: its entries' fsync
  ASSERT_TRUE(root.ok()) << root.status();
  close(*root);
  ASSERT_TRUE(UnlinkBeneath(root_ + "/job-1/step_2/shard").ok());
  EXPECT_EQ(UnlinkBeneath(root_ + "/job-1/step_2/shard").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(UnlinkBeneath(root_ + "/job-1/step_9/MANIFEST.json").code(),
            absl::StatusCode::kNotFound);  // its folder missing too
  ASSERT_TRUE(Write(root_ + "/job-1/step_2/again", "x").ok());
  ASSERT_TRUE(RemoveTreeBeneath(root_ + "/job-1/step_2").ok());
  EXPECT_FALSE(fs::exists(root_ + "/job-1/step_2"));
  EXPECT_TRUE(RemoveTreeBeneath(root_ + "/job-1/step_2").ok());  // missing: fine
}

// The attack: a user who can write under the root plants a link at a name the trainer makes
// later (a pending job's folder, known from its id) to a folder outside the roots.
TEST_F(WriteBeneathTest, APlantedLinkToOutsideIsRefusedAtEveryWrite) {
  fs::create_directory_symlink(base_ + "/outside", root_ + "/job-2");
  fs::create_directory_symlink("../../outside", root_ + "/job-1/rel");
  for (const std::string& dir : {root_ + "/job-2", root_ + "/job-1/rel"}) {
    SCOPED_TRACE(dir);
    absl::Status s = MakeDirBeneath(dir + "/step_2", 0755);
    EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("resolves outside the root " + root_));
    EXPECT_EQ(Write(dir + "/MANIFEST.json", "{}").code(), absl::StatusCode::kPermissionDenied);
    EXPECT_EQ(UnlinkBeneath(dir + "/keep.txt").code(), absl::StatusCode::kPermissionDenied);
    EXPECT_EQ(RenameBeneath(dir + "/keep.txt", root_ + "/job-1/stolen").code(),
              absl::StatusCode::kPermissionDenied);
    EXPECT_EQ(RemoveTreeBeneath(dir + "/keep.txt").code(), absl::StatusCode::kPermissionDenied);
  }
  // A link as the last component is never followed: written over, or removed itself.
  fs::create_symlink(base_ + "/outside/keep.txt", root_ + "/job-1/shard.bin");
  absl::Status s = Write(root_ + "/job-1/shard.bin", "overwrite");
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("is a symbolic link"));
  ASSERT_TRUE(RemoveTreeBeneath(root_ + "/job-2").ok());  // the link goes, not its target
  EXPECT_FALSE(fs::is_symlink(root_ + "/job-2"));
  EXPECT_TRUE(OutsideUntouched());
}

TEST_F(WriteBeneathTest, ATreeWithLinksInsideIsRemovedWithoutFollowingThem) {
  fs::create_directories(root_ + "/job-1/step_4/sub");
  std::ofstream(root_ + "/job-1/step_4/sub/f") << "f";
  fs::create_directory_symlink(base_ + "/outside", root_ + "/job-1/step_4/out");
  fs::create_symlink(base_ + "/outside/keep.txt", root_ + "/job-1/step_4/sub/keep");
  ASSERT_TRUE(RemoveTreeBeneath(root_ + "/job-1/step_4").ok());
  EXPECT_FALSE(fs::exists(root_ + "/job-1/step_4"));
  EXPECT_TRUE(OutsideUntouched());
}

TEST_F(WriteBeneathTest, OutsideEveryRootIsRefusedAndNoRootsMeansPlainCalls) {
  absl::Status s = MakeDirBeneath(base_ + "/outside/new", 0755);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(s.message()), HasSubstr("is outside the roots [" + root_ + "]"));
  EXPECT_EQ(Write(root_ + "/../outside/x", "x").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(OutsideUntouched());
  SetWriteRoots({});
  ASSERT_TRUE(MakeDirBeneath(base_ + "/outside/new", 0755).ok());
  ASSERT_TRUE(Write(base_ + "/outside/new/x", "plain").ok());
  EXPECT_EQ(Read(base_ + "/outside/new/x"), "plain");
}

}  // namespace
}  // namespace shardline
