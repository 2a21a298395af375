// Fuzz target: the PyTorch DCP readers that take files from anyone (checkpoint.init_from_dcp):
// the input is read both as a .metadata pickle (ParseDcpMetadata) and as one chunk's
// torch.save archive (ReadTorchSavedTensor), which covers the pickle reader and the zip reader.
//
// Invariants checked beyond "no crash" (ASan/UBSan catch overflows and out-of-bounds reads):
// errors are DATA_LOSS or INVALID_ARGUMENT and start with the name given; accepted metadata
// lists every chunk inside its tensor with a plain file name and a byte range; an accepted
// archive's view lies inside its storage (every element the reader will touch is readable).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "checkpoint/dcp_reader.h"
#include "checkpoint/torch_archive.h"
#include "fuzz/fuzz_check.h"

namespace {

using shardline::checkpoint::DcpTensor;
using shardline::checkpoint::TorchSavedTensor;

void CheckError(const absl::Status& s, const char* what) {
  FUZZ_CHECK(
      s.code() == absl::StatusCode::kDataLoss || s.code() == absl::StatusCode::kInvalidArgument,
      s.ToString());
  FUZZ_CHECK(absl::StartsWith(s.message(), what), s.ToString());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<std::map<std::string, DcpTensor>> meta =
      shardline::checkpoint::ParseDcpMetadata(bytes, "m", nullptr);
  if (!meta.ok()) {
    CheckError(meta.status(), "m");
  } else {
    for (const auto& [fqn, t] : *meta) {
      for (const auto& c : t.chunks) {
        FUZZ_CHECK(!c.file.empty() && c.file.find('/') == std::string::npos && c.file != "..",
                   fqn + ": " + c.file);
        FUZZ_CHECK(c.offset >= 0 && c.length >= 0, fqn);
        FUZZ_CHECK(c.offsets.size() == t.shape.size() && c.sizes.size() == t.shape.size(), fqn);
        for (size_t d = 0; d < t.shape.size(); ++d) {
          FUZZ_CHECK(
              c.offsets[d] >= 0 && c.sizes[d] >= 0 && c.offsets[d] + c.sizes[d] <= t.shape[d], fqn);
        }
      }
    }
  }
  absl::StatusOr<TorchSavedTensor> t = shardline::checkpoint::ReadTorchSavedTensor(bytes, "a");
  if (!t.ok()) {
    CheckError(t.status(), "a");
  } else {
    // Touch the first and last element of the view: ASan reports a read outside the storage.
    int64_t last = t->storage_offset;
    bool empty = false;
    for (size_t d = 0; d < t->shape.size(); ++d) {
      if (t->shape[d] == 0) empty = true;
      if (t->shape[d] > 0) last += (t->shape[d] - 1) * t->strides[d];
    }
    if (!empty) {
      volatile float a = shardline::checkpoint::TorchElementAsFloat(*t, t->storage_offset);
      volatile float b = shardline::checkpoint::TorchElementAsFloat(*t, last);
      (void)a;
      (void)b;
    }
  }
  return 0;
}
