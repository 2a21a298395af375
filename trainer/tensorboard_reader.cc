#include "trainer/tensorboard_reader.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "trainer/tensorboard_writer.h"

namespace shardline::trainer {
namespace {

uint64_t LittleEndian(const std::string& s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[at + i]);
  return v;
}

}  // namespace

absl::StatusOr<std::vector<tensorboard::Event>> ReadTensorBoardEvents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open the event file ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string s = ss.str();
  std::vector<tensorboard::Event> events;
  size_t at = 0;
  // A record: length (8 bytes), masked CRC of the length (4), data, masked CRC of the data (4).
  while (at < s.size()) {
    auto loss = [&](const std::string& what) {
      return absl::DataLossError(absl::StrCat(path, " at byte ", at, ": ", what));
    };
    if (s.size() - at < 16) return loss("a truncated record");
    const uint64_t n = LittleEndian(s, at, 8);
    if (LittleEndian(s, at + 8, 4) != MaskedCrc32c(s.substr(at, 8))) {
      return loss("the length's checksum does not match");
    }
    if (s.size() - at - 16 < n) return loss("a truncated record");
    const std::string data = s.substr(at + 12, n);
    if (LittleEndian(s, at + 12 + n, 4) != MaskedCrc32c(data)) {
      return loss("the data's checksum does not match");
    }
    tensorboard::Event e;
    if (!e.ParseFromString(data)) return loss("an event that does not parse");
    events.push_back(std::move(e));
    at += 12 + n + 4;
  }
  return events;
}

}  // namespace shardline::trainer
