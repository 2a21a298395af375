#include "trainer/tensorboard_writer.h"

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "checkpoint/crc32c.h"
#include "gtest/gtest.h"
#include "third_party/tensorboard/proto/event.pb.h"

namespace shardline::trainer {
namespace {

uint64_t LittleEndian(const std::string& s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[at + i]);
  return v;
}

// The records of a TFRecord file, their checksums verified.
std::vector<tensorboard::Event> ReadEvents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string s = ss.str();
  std::vector<tensorboard::Event> events;
  size_t at = 0;
  while (at < s.size()) {
    EXPECT_GE(s.size() - at, 16u);
    const uint64_t n = LittleEndian(s, at, 8);
    EXPECT_EQ(LittleEndian(s, at + 8, 4), MaskedCrc32c(s.substr(at, 8)));
    const std::string data = s.substr(at + 12, n);
    EXPECT_EQ(LittleEndian(s, at + 12 + n, 4), MaskedCrc32c(data));
    tensorboard::Event e;
    EXPECT_TRUE(e.ParseFromString(data));
    events.push_back(e);
    at += 12 + n + 4;
  }
  return events;
}

TEST(TensorBoardWriter, MaskedCrcIsTheTfRecordMask) {
  // CRC32C("123456789") = 0xE3069283; masked: rotate right 15, add 0xa282ead8.
  const uint32_t crc = 0xE3069283u;
  EXPECT_EQ(checkpoint::Crc32c("123456789", 9), crc);
  EXPECT_EQ(MaskedCrc32c("123456789"), ((crc >> 15) | (crc << 17)) + 0xa282ead8u);
  const std::string r = TfRecord("abc");
  ASSERT_EQ(r.size(), 3u + 16u);
  EXPECT_EQ(LittleEndian(r, 0, 8), 3u);
  EXPECT_EQ(r.substr(12, 3), "abc");
}

TEST(TensorBoardWriter, WritesTheVersionThenOneEventPerStepWithItsScalars) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/tb/run";
  std::filesystem::remove_all(dir);
  auto w = TensorBoardWriter::Open(dir);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_NE((*w)->path().find(dir + "/events.out.tfevents."), std::string::npos);
  ASSERT_TRUE((*w)->WriteScalars(10, 1700000000.5, {{"loss", 2.5}, {"lr", 1e-3}}).ok());
  ASSERT_TRUE((*w)->WriteScalars(20, 1700000001.5, {{"loss", 2.25}, {"val_loss", 2.4}}).ok());
  const std::vector<tensorboard::Event> events = ReadEvents((*w)->path());  // flushed already
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].file_version(), "brain.Event:2");
  EXPECT_EQ(events[1].step(), 10);
  EXPECT_DOUBLE_EQ(events[1].wall_time(), 1700000000.5);
  ASSERT_EQ(events[1].summary().value_size(), 2);
  EXPECT_EQ(events[1].summary().value(0).tag(), "loss");
  EXPECT_FLOAT_EQ(events[1].summary().value(0).simple_value(), 2.5f);
  EXPECT_FLOAT_EQ(events[1].summary().value(1).simple_value(), 1e-3f);
  EXPECT_EQ(events[2].summary().value(1).tag(), "val_loss");
}

TEST(TensorBoardWriter, AnUncreatableDirectoryIsInternalNamingIt) {
  auto w = TensorBoardWriter::Open("/proc/no/such/dir");
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), absl::StatusCode::kInternal);
  EXPECT_NE(w.status().message().find("/proc/no/such/dir"), std::string::npos);
}

}  // namespace
}  // namespace shardline::trainer
