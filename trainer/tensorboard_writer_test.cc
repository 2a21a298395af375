#include "trainer/tensorboard_writer.h"

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "checkpoint/crc32c.h"
#include "gtest/gtest.h"
#include "third_party/tensorboard/proto/event.pb.h"
#include "trainer/tensorboard_reader.h"

namespace shardline::trainer {
namespace {

uint64_t LittleEndian(const std::string& s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[at + i]);
  return v;
}

std::vector<tensorboard::Event> ReadEvents(const std::string& path) {
  absl::StatusOr<std::vector<tensorboard::Event>> events = ReadTensorBoardEvents(path);
  EXPECT_TRUE(events.ok()) << events.status();
  return events.ok() ? *events : std::vector<tensorboard::Event>{};
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

TEST(TensorBoardReader, AFlippedByteIsDataLossNamingTheFileAndOffset) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/tb/flipped";
  std::filesystem::remove_all(dir);
  auto w = TensorBoardWriter::Open(dir);
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_TRUE((*w)->WriteScalars(1, 1700000000.5, {{"loss", 2.5}}).ok());
  const std::string path = (*w)->path();
  w->reset();
  {
    std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(-6, std::ios::end);  // Inside the second record's data.
    f.put('\x7f');
  }
  auto events = ReadTensorBoardEvents(path);
  ASSERT_EQ(events.status().code(), absl::StatusCode::kDataLoss) << events.status();
  EXPECT_NE(events.status().message().find(path + " at byte "), std::string::npos);
  EXPECT_NE(events.status().message().find("checksum"), std::string::npos);
  EXPECT_EQ(ReadTensorBoardEvents(dir + "/none").status().code(), absl::StatusCode::kNotFound);
}

TEST(TensorBoardWriter, AnUncreatableDirectoryIsInternalNamingIt) {
  auto w = TensorBoardWriter::Open("/proc/no/such/dir");
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), absl::StatusCode::kInternal);
  EXPECT_NE(w.status().message().find("/proc/no/such/dir"), std::string::npos);
}

}  // namespace
}  // namespace shardline::trainer
