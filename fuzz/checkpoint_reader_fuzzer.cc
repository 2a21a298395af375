// Fuzz target: a whole checkpoint directory read through the real CheckpointReader
// (checkpoint/checkpoint_reader.h). The input is split at each line "@@@@@@@@": the first part
// becomes <tmp>/step_7/MANIFEST.json, the next ones shard_00000.bin, shard_00001.bin, ... (at
// most 4). The files live in one temporary directory per process, rewritten for every input.
//
// Invariants checked beyond "no crash": errors carry the documented codes; the reader accepts
// only plain data file names (nothing outside the step directory); MapElements (read through
// CopyMapped) agrees with ReadElements; when VerifyAll
// passes, every tensor reads back, and what ReadElements returns is the bytes of the data file
// at the manifest's offsets.
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/format.h"
#include "fuzz/fuzz_check.h"
#include "proto/checkpoint.pb.h"

namespace {

constexpr int kMaxDataFiles = 4;
// Elements read per tensor at most (the manifest may claim any size; the files are small).
constexpr int64_t kMaxReadElements = 1 << 16;

const std::string& Root() {
  static const std::string* root = [] {
    const char* tmp = std::getenv("TEST_TMPDIR");
    std::string templ = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/ckpt_fuzz_XXXXXX");
    FUZZ_CHECK(::mkdtemp(templ.data()) != nullptr, "mkdtemp " + templ);
    return new std::string(templ);
  }();
  return *root;
}

void WriteFile(const std::string& path, absl::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  FUZZ_CHECK(out.good(), "write " + path);
}

bool IsDocumentedCode(absl::StatusCode c) {
  return c == absl::StatusCode::kNotFound || c == absl::StatusCode::kFailedPrecondition ||
         c == absl::StatusCode::kDataLoss;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 1024 * 1024) return 0;
  const std::vector<absl::string_view> parts =
      absl::StrSplit(absl::string_view(reinterpret_cast<const char*>(data), size), "\n@@@@@@@@\n");
  const std::string step_dir = shardline::checkpoint::StepDir(Root(), 7);
  ::mkdir(step_dir.c_str(), 0755);
  WriteFile(absl::StrCat(step_dir, "/", shardline::checkpoint::kManifestFile), parts[0]);
  for (int i = 0; i < kMaxDataFiles; ++i) {
    const std::string path = absl::StrCat(step_dir, "/", shardline::checkpoint::DataFileName(i));
    if (i + 1 < static_cast<int>(parts.size())) {
      WriteFile(path, parts[i + 1]);
    } else {
      ::unlink(path.c_str());
    }
  }

  absl::StatusOr<std::unique_ptr<shardline::checkpoint::CheckpointReader>> reader =
      shardline::checkpoint::CheckpointReader::Open(Root(), -1);
  if (!reader.ok()) {
    FUZZ_CHECK(IsDocumentedCode(reader.status().code()),
               "Open gave an undocumented error: " + reader.status().ToString());
    return 0;
  }
  const shardline::checkpoint::CheckpointReader& r = **reader;
  // The reader only ever opens files inside the step directory.
  for (const shardline::DataFile& f : r.manifest().files()) {
    FUZZ_CHECK(!f.name().empty() && f.name().find('/') == std::string::npos && f.name() != "..",
               "Open accepted data file name '" + f.name() + "'");
  }
  const absl::Status files = r.VerifyFiles();
  if (!files.ok()) {
    FUZZ_CHECK(IsDocumentedCode(files.code()), "VerifyFiles: " + files.ToString());
  }
  const absl::Status all = r.VerifyAll();
  if (!all.ok()) {
    FUZZ_CHECK(IsDocumentedCode(all.code()), "VerifyAll: " + all.ToString());
  }
  std::vector<float> buf;
  for (const shardline::TensorEntry& t : r.manifest().tensors()) {
    FUZZ_CHECK(r.FindTensor(t.name()) >= 0, "FindTensor misses " + t.name());
    int64_t numel = 0;
    for (const shardline::TensorRange& range : t.ranges()) numel += range.numel();
    const int64_t end = std::min(numel, kMaxReadElements);
    buf.assign(static_cast<size_t>(end), 0.0f);
    const absl::Status s = r.ReadElements(t.name(), 0, end, buf.data());
    // MapElements (what a training load uses) must agree with ReadElements: it fails whenever
    // ReadElements does, fails otherwise only for a file of the wrong size (which VerifyFiles
    // also refuses), and when it succeeds its pieces hold the same values.
    const auto mapped = r.MapElements(t.name(), 0, end);
    if (!mapped.ok()) {
      FUZZ_CHECK(IsDocumentedCode(mapped.status().code()),
                 "MapElements: " + mapped.status().ToString());
      FUZZ_CHECK(!s.ok() || !files.ok(),
                 "ReadElements read " + t.name() +
                     " but MapElements failed: " + mapped.status().ToString());
    }
    if (!s.ok()) {
      FUZZ_CHECK(IsDocumentedCode(s.code()), "ReadElements: " + s.ToString());
      FUZZ_CHECK(!all.ok(), "VerifyAll passed but ReadElements failed: " + s.ToString());
      FUZZ_CHECK(!mapped.ok(), "ReadElements failed but MapElements did not: " + s.ToString());
      continue;
    }
    if (mapped.ok()) {
      std::vector<float> via_map(static_cast<size_t>(end), 0.0f);
      int64_t covered = 0;
      for (const auto& piece : *mapped) {
        FUZZ_CHECK(piece.offset >= 0 && piece.count >= 0 && piece.offset + piece.count <= end,
                   "MapElements piece outside the window for " + t.name());
        const absl::Status copied = r.CopyMapped(piece, via_map.data() + piece.offset);
        FUZZ_CHECK(copied.ok(), "CopyMapped of an unchanged file failed: " + copied.ToString());
        covered += piece.count;
      }
      FUZZ_CHECK(
          covered == end && (end == 0 || std::memcmp(via_map.data(), buf.data(), end * 4) == 0),
          "MapElements gave other values than ReadElements for " + t.name());
    }
    // The values are the data file's bytes at the first range's offset.
    if (end > 0 && !t.ranges().empty()) {
      const shardline::TensorRange& first = t.ranges(0);
      const int64_t n = std::min<int64_t>(end, first.numel());
      std::ifstream in(absl::StrCat(r.dir(), "/", first.file()), std::ios::binary);
      std::vector<float> want(static_cast<size_t>(n));
      in.seekg(first.file_offset());
      in.read(reinterpret_cast<char*>(want.data()), n * 4);
      FUZZ_CHECK(in.good() && std::memcmp(want.data(), buf.data(), n * 4) == 0,
                 "ReadElements returned other bytes than the file holds for " + t.name());
    }
  }
  return 0;
}
