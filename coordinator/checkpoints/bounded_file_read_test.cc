#include "coordinator/checkpoints/bounded_file_read.h"

#include <sys/stat.h>

#include <cstdlib>
#include <fstream>

#include "gtest/gtest.h"

namespace shardline::coordinator {
namespace {

std::string TmpPath(const std::string& name) {
  return std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
}

TEST(ReadRegularFileBounded, ReadsARegularFile) {
  const std::string path = TmpPath("plain");
  std::ofstream(path) << "{\"step\": 3}";
  auto got = ReadRegularFileBounded(path, absl::Seconds(5), 1 << 20);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "{\"step\": 3}");
}

TEST(ReadRegularFileBounded, FifoIsRefusedWithoutBlocking) {
  const std::string path = TmpPath("fifo");
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  const absl::Time start = absl::Now();
  auto got = ReadRegularFileBounded(path, absl::Seconds(30), 1 << 20);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(got.status().message(), path + " is not a regular file (a FIFO); not read");
}

TEST(ReadRegularFileBounded, DeviceAndDirectoryAreRefused) {
  auto dev = ReadRegularFileBounded("/dev/zero", absl::Seconds(5), 1 << 20);
  EXPECT_EQ(dev.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(dev.status().message(),
            "/dev/zero is not a regular file (a character device); not read");
  auto dir = ReadRegularFileBounded(TmpPath(""), absl::Seconds(5), 1 << 20);
  EXPECT_EQ(dir.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(ReadRegularFileBounded, MissingAndOversizedFilesAreErrors) {
  auto missing = ReadRegularFileBounded(TmpPath("none"), absl::Seconds(5), 1 << 20);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  const std::string path = TmpPath("big");
  std::ofstream(path) << std::string(100, 'x');
  auto big = ReadRegularFileBounded(path, absl::Seconds(5), 10);
  EXPECT_EQ(big.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(big.status().message(), path + " has 100 bytes, more than the 10 allowed");
}

}  // namespace
}  // namespace shardline::coordinator
