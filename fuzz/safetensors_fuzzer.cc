// Fuzz target: a whole .safetensors file (the input's bytes) read through SafetensorsReader and
// ReadSafetensors (checkpoint/safetensors_reader.h) from a real temporary file.
//
// Invariants checked beyond "no crash" (ASan/UBSan catch overflows and out-of-bounds reads):
// errors are DATA_LOSS and name the file; an accepted header describes what the reader checks
// (known dtype, shape x dtype size == byte range, ranges inside the data section, no two
// overlapping, tensors sorted by unique name); Read returns the file's bytes at the range;
// ReadSafetensors agrees with the reader; and what was read survives WriteSafetensors and a
// second read unchanged (names, dtypes, shapes, bytes, metadata).
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/safetensors_reader.h"
#include "fuzz/fuzz_check.h"

namespace {

using shardline::checkpoint::SafetensorsEntry;
using shardline::checkpoint::SafetensorsReader;
using shardline::checkpoint::SafetensorsTensor;

const std::string& Dir() {
  static const std::string* dir = [] {
    const char* tmp = std::getenv("TEST_TMPDIR");
    std::string templ = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/st_fuzz_XXXXXX");
    FUZZ_CHECK(::mkdtemp(templ.data()) != nullptr, "mkdtemp " + templ);
    return new std::string(templ);
  }();
  return *dir;
}

void CheckError(const absl::Status& s, const std::string& path, const char* what) {
  FUZZ_CHECK(s.code() == absl::StatusCode::kDataLoss,
             std::string(what) + " gave an undocumented error: " + s.ToString());
  FUZZ_CHECK(absl::StrContains(s.message(), absl::StrCat("safetensors file ", path, ": ")),
             std::string(what) + " error does not name the file: " + s.ToString());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 1024 * 1024) return 0;
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  const std::string path = Dir() + "/in.safetensors";
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    FUZZ_CHECK(out.good(), "write " + path);
  }
  absl::StatusOr<std::unique_ptr<SafetensorsReader>> reader = SafetensorsReader::Open(path);
  absl::StatusOr<std::vector<SafetensorsTensor>> all = shardline::checkpoint::ReadSafetensors(path);
  if (!reader.ok()) {
    CheckError(reader.status(), path, "Open");
    FUZZ_CHECK(all.status() == reader.status(),
               "ReadSafetensors and Open disagree: " + all.status().ToString());
    return 0;
  }
  FUZZ_CHECK(all.ok(),
             "Open accepted the file, ReadSafetensors did not: " + all.status().ToString());
  const SafetensorsReader& r = **reader;
  // The 8-byte length and the header passed, so the data section starts there.
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t{data[i]} << (8 * i);
  FUZZ_CHECK(n <= size - 8, "accepted a header length past the end");
  const int64_t data_start = static_cast<int64_t>(8 + n);
  const int64_t data_bytes = static_cast<int64_t>(size) - data_start;

  const std::vector<SafetensorsEntry>& ts = r.tensors();
  FUZZ_CHECK(all->size() == ts.size(), "ReadSafetensors returned another number of tensors");
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (size_t i = 0; i < ts.size(); ++i) {
    const SafetensorsEntry& t = ts[i];
    FUZZ_CHECK(i == 0 || ts[i - 1].name < t.name, "tensors not sorted by unique name: " + t.name);
    FUZZ_CHECK(r.Find(t.name) == &t, "Find misses " + t.name);
    const int item = shardline::checkpoint::SafetensorsDtypeSize(t.dtype);
    FUZZ_CHECK(item > 0, "accepted dtype " + t.dtype);
    int64_t numel = 1;
    for (int64_t d : t.shape) {
      FUZZ_CHECK(d >= 0, "accepted a negative dimension in " + t.name);
      FUZZ_CHECK(!__builtin_mul_overflow(numel, d, &numel), "numel overflows in " + t.name);
    }
    int64_t want = 0;
    FUZZ_CHECK(!__builtin_mul_overflow(numel, item, &want), "byte size overflows in " + t.name);
    FUZZ_CHECK(numel == t.numel && want == t.bytes(), "size does not match shape in " + t.name);
    FUZZ_CHECK(0 <= t.begin && t.begin <= t.end && t.end <= data_bytes,
               "range outside the data section in " + t.name);
    if (t.bytes() > 0) ranges.emplace_back(t.begin, t.end);
    std::string got(static_cast<size_t>(t.bytes()), '\0');
    const absl::Status s = r.Read(t, got.data());
    FUZZ_CHECK(s.ok(), "Read of an unchanged file failed: " + s.ToString());
    FUZZ_CHECK(got == bytes.substr(static_cast<size_t>(data_start + t.begin), got.size()),
               "Read returned other bytes than the file holds for " + t.name);
    const SafetensorsTensor& a = (*all)[i];
    FUZZ_CHECK(a.name == t.name && a.dtype == t.dtype && a.shape == t.shape && a.data == got,
               "ReadSafetensors disagrees with the reader on " + t.name);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    FUZZ_CHECK(ranges[i].first >= ranges[i - 1].second, "accepted overlapping tensors");
  }

  // Round trip through the writer.
  const std::string again = Dir() + "/again.safetensors";
  const absl::Status w = shardline::checkpoint::WriteSafetensors(again, *all, r.metadata());
  FUZZ_CHECK(w.ok(), "WriteSafetensors of what was read failed: " + w.ToString());
  absl::StatusOr<std::unique_ptr<SafetensorsReader>> back = SafetensorsReader::Open(again);
  FUZZ_CHECK(back.ok(), "the rewritten file does not read: " + back.status().ToString());
  FUZZ_CHECK((*back)->metadata() == r.metadata(), "metadata changed in the round trip");
  absl::StatusOr<std::vector<SafetensorsTensor>> all_back =
      shardline::checkpoint::ReadSafetensors(again);
  FUZZ_CHECK(all_back.ok() && all_back->size() == all->size(),
             "the rewritten file reads another number of tensors");
  for (size_t i = 0; i < all->size(); ++i) {
    const SafetensorsTensor& x = (*all)[i];
    const SafetensorsTensor& y = (*all_back)[i];
    FUZZ_CHECK(x.name == y.name && x.dtype == y.dtype && x.shape == y.shape && x.data == y.data,
               "tensor " + x.name + " changed in the round trip");
  }
  return 0;
}
