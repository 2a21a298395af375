// CheckpointReader with a data file truncated after the reader opened or mapped it: every path
// that reads the file (pread, the checksum pass over the mapping, the copy out of the mapping)
// gives DATA_LOSS naming the file and the tensor instead of killing the process with SIGBUS.
#include "checkpoint/checkpoint_reader.h"

#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "checkpoint/format.h"
#include "checkpoint/mapped_read_guard.h"
#include "checkpoint/shard_writer.h"
#include "common/testing/temp_dir.h"
#include "gtest/gtest.h"

namespace shardline::checkpoint {
namespace {

// One shard file holding tensor "a" (first, 4096 floats: a page and more) and "b" (after it).
std::string WriteTwoTensors(const std::string& root) {
  const std::string dir = StepDir(root, 1);
  std::vector<float> a(4096), b(4096);
  for (int i = 0; i < 4096; ++i) a[i] = static_cast<float>(i), b[i] = -static_cast<float>(i);
  EXPECT_TRUE(
      WriteShard(dir, 0, "id", {{"a", {4096}, 0, 4096, a.data()}, {"b", {4096}, 0, 4096, b.data()}})
          .ok());
  CheckpointMeta meta;
  meta.step = 1;
  EXPECT_TRUE(CommitCheckpoint(dir, 1, "id", meta, absl::Seconds(5)).ok());
  return dir + "/" + DataFileName(0);
}

void ExpectTruncatedNaming(const absl::Status& s, const std::string& file,
                           const std::string& tensor) {
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), absl::StrCat("checkpoint data file ", file))) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), absl::StrCat("tensor ", tensor))) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "truncated")) << s;
}

TEST(CheckpointReader, CopyFromAMappingTruncatedAfterMapElementsIsDataLoss) {
  const std::string root = FreshTempDir("reader_trunc_copy");
  const std::string file = WriteTwoTensors(root);
  auto r = CheckpointReader::Open(root, -1);
  ASSERT_TRUE(r.ok()) << r.status();
  auto pieces = (*r)->MapElements("b", 0, 4096);
  ASSERT_TRUE(pieces.ok()) << pieces.status();
  ASSERT_EQ(pieces->size(), 1u);
  std::vector<float> out(4096);
  ASSERT_TRUE((*r)->CopyMapped((*pieces)[0], out.data()).ok());
  EXPECT_EQ(out[4095], -4095.0f);
  ASSERT_EQ(::truncate(file.c_str(), 4096 * 4), 0);  // Only "a" is left.
  absl::Status s = (*r)->CopyMapped((*pieces)[0], out.data());
  ExpectTruncatedNaming(s, file, "b");
  EXPECT_TRUE(absl::StrContains(s.message(), "was truncated after it was mapped")) << s;
  // The process lives on, and what is still in the file still reads.
  auto a = (*r)->MapElements("a", 0, 4096);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE((*r)->CopyMapped((*a)[0], out.data()).ok());
  EXPECT_EQ(out[4095], 4095.0f);
}

TEST(CheckpointReader, ChecksumPassOverAMappingTruncatedAfterItWasMappedIsDataLoss) {
  const std::string root = FreshTempDir("reader_trunc_crc");
  const std::string file = WriteTwoTensors(root);
  auto r = CheckpointReader::Open(root, -1);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE((*r)->MapElements("a", 0, 10).ok());  // Maps the file.
  ASSERT_EQ(::truncate(file.c_str(), 4096 * 4 + 100), 0);
  ExpectTruncatedNaming((*r)->MapElements("b", 0, 10).status(), file, "b");
}

TEST(CheckpointReader, ReadElementsOfAFileTruncatedAfterOpenIsDataLoss) {
  const std::string root = FreshTempDir("reader_trunc_read");
  const std::string file = WriteTwoTensors(root);
  auto r = CheckpointReader::Open(root, -1);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE((*r)->VerifyFiles().ok());
  ASSERT_EQ(::truncate(file.c_str(), 100), 0);
  std::vector<float> out(4096);
  ExpectTruncatedNaming((*r)->ReadElements("b", 0, 4096, out.data()), file, "b");
  ExpectTruncatedNaming((*r)->VerifyFiles(), file, "a");
}

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAsan = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAsan = true;
#else
constexpr bool kAsan = false;
#endif
#else
constexpr bool kAsan = false;
#endif

// The handler only catches faults inside a guarded range: any other SIGBUS still ends the
// process as before.
TEST(GuardMappedReadDeathTest, ASigbusOutsideAGuardedReadStillKillsTheProcess) {
  if (kAsan) {
    // ASan's SIGBUS handler, installed before ours, would report the deliberate fault, and
    // tools/sanitize.sh counts every report as a failure.
    GTEST_SKIP() << "the deliberate SIGBUS would be an ASan report";
  }
  const std::string root = FreshTempDir("reader_trunc_unguarded");
  const std::string file = WriteTwoTensors(root);
  EXPECT_EXIT(
      {
        auto r = CheckpointReader::Open(root, -1);
        auto pieces = (*r)->MapElements("b", 0, 4096);
        float x = 0;
        // Installs the handler, and reads an unrelated range under it.
        GuardMappedRead(&x, sizeof(x), [&] { x = 1; });
        (void)::truncate(file.c_str(), 0);
        volatile float y = (*pieces)[0].src[4095];  // Unguarded read past the end.
        (void)y;
        std::exit(0);
      },
      ::testing::KilledBySignal(SIGBUS), "");
}

}  // namespace
}  // namespace shardline::checkpoint
