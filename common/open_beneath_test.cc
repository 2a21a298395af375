#include "common/open_beneath.h"

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

using ::testing::HasSubstr;

class OpenBeneathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = std::string(std::getenv("TEST_TMPDIR")) + "/beneath";
    std::filesystem::remove_all(base_);
    std::filesystem::create_directories(base_ + "/data/sub");
    std::filesystem::create_directories(base_ + "/ckpt");
    std::filesystem::create_directories(base_ + "/secret");
    std::ofstream(base_ + "/data/sub/corpus.txt") << "inside";
    std::ofstream(base_ + "/secret/key.pem") << "secret";
    std::ofstream(base_ + "/ckpt/shard.bin") << "shard";
    SetOpenRoots({base_ + "/data", base_ + "/ckpt"});
  }
  void TearDown() override { SetOpenRoots({}); }

  // The file's first bytes through `fd` (closed).
  static std::string ReadAll(int fd) {
    char buf[64];
    const ssize_t n = read(fd, buf, sizeof(buf));
    close(fd);
    return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
  }

  std::string base_;
};

TEST_F(OpenBeneathTest, FilesUnderEitherRootOpen) {
  auto fd = OpenForRead(base_ + "/data/sub/corpus.txt", "data file");
  ASSERT_TRUE(fd.ok()) << fd.status();
  EXPECT_EQ(ReadAll(*fd), "inside");
  fd = OpenForRead(base_ + "/ckpt/shard.bin", "shard");
  ASSERT_TRUE(fd.ok()) << fd.status();
  EXPECT_EQ(ReadAll(*fd), "shard");
  // Links that stay inside the roots are followed: relative, absolute, from one root to another.
  std::filesystem::create_symlink("sub/corpus.txt", base_ + "/data/relative.txt");
  std::filesystem::create_symlink(base_ + "/data/sub/corpus.txt", base_ + "/data/absolute.txt");
  std::filesystem::create_symlink(base_ + "/ckpt/shard.bin", base_ + "/data/other_root.bin");
  for (const char* name : {"relative.txt", "absolute.txt"}) {
    fd = OpenForRead(base_ + "/data/" + name, "data file");
    ASSERT_TRUE(fd.ok()) << name << ": " << fd.status();
    EXPECT_EQ(ReadAll(*fd), "inside");
  }
  fd = OpenForRead(base_ + "/data/other_root.bin", "data file");
  ASSERT_TRUE(fd.ok()) << fd.status();
  EXPECT_EQ(ReadAll(*fd), "shard");
}

// The window the worker's check leaves: a checked file swapped for a link out of the root (here
// made before the open, as an attacker would between the check and the open) is refused by the
// open itself, and so is ".." after a link to /.
TEST_F(OpenBeneathTest, ALinkOrDotDotOutOfTheRootIsRefusedAtTheOpen) {
  std::filesystem::remove(base_ + "/data/sub/corpus.txt");
  std::filesystem::create_symlink(base_ + "/secret/key.pem", base_ + "/data/sub/corpus.txt");
  auto fd = OpenForRead(base_ + "/data/sub/corpus.txt", "data file");
  EXPECT_EQ(fd.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(fd.status().message(),
            "data file \"" + base_ + "/data/sub/corpus.txt\" resolves to " + base_ +
                "/secret/key.pem outside the roots [" + base_ + "/data, " + base_ +
                "/ckpt] (a symbolic link or \"..\" leaves them); refused at the open");
  std::filesystem::create_symlink("/", base_ + "/data/lnk");
  fd = OpenForRead(base_ + "/data/lnk/.." + base_ + "/secret/key.pem", "data file");
  EXPECT_EQ(fd.status().code(), absl::StatusCode::kPermissionDenied) << fd.status();
  fd = OpenForRead(base_ + "/data/sub/../../secret/key.pem", "data file");
  EXPECT_EQ(fd.status().code(), absl::StatusCode::kPermissionDenied) << fd.status();
  // A magic link (/proc/self/root) is not followed either.
  std::filesystem::create_symlink("/proc/self/root/etc/passwd", base_ + "/data/magic");
  fd = OpenForRead(base_ + "/data/magic", "data file");
  EXPECT_EQ(fd.status().code(), absl::StatusCode::kPermissionDenied) << fd.status();
}

TEST_F(OpenBeneathTest, OutsideEveryRootMissingAndNonRegularAreRefused) {
  auto fd = OpenForRead(base_ + "/secret/key.pem", "model.torchscript_path");
  EXPECT_EQ(fd.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(fd.status().message(), HasSubstr("model.torchscript_path \"" + base_ +
                                               "/secret/key.pem\" is outside the roots ["));
  fd = OpenForRead(base_ + "/data/absent.txt", "data file");
  EXPECT_EQ(fd.status().code(), absl::StatusCode::kNotFound) << fd.status();
  // A FIFO would block a plain open until a writer came: refused at once.
  ASSERT_EQ(mkfifo((base_ + "/data/fifo").c_str(), 0600), 0);
  fd = OpenForRead(base_ + "/data/fifo", "data file");
  EXPECT_EQ(fd.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(fd.status().message(), HasSubstr("is not a regular file (a FIFO, device or socket)"));
  fd = OpenForRead(base_ + "/data/sub", "data file");
  EXPECT_THAT(fd.status().message(), HasSubstr("is not a regular file (a folder)"));
}

TEST_F(OpenBeneathTest, WithoutRootsItIsAPlainOpenOfARegularFile) {
  SetOpenRoots({});
  auto fd = OpenForRead(base_ + "/secret/key.pem", "data file");
  ASSERT_TRUE(fd.ok()) << fd.status();
  EXPECT_EQ(ReadAll(*fd), "secret");
  // The descriptor blocks as a plain open's would (O_NONBLOCK was only for the open).
  fd = OpenForRead(base_ + "/secret/key.pem", "data file");
  ASSERT_TRUE(fd.ok());
  EXPECT_EQ(fcntl(*fd, F_GETFL) & O_NONBLOCK, 0);
  close(*fd);
  EXPECT_EQ(OpenForRead("/dev/zero", "data file").status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace shardline
