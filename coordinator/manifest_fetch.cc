#include "coordinator/manifest_fetch.h"

#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "checkpoint/format.h"
#include "checkpoint/manifest_io.h"
#include "coordinator/bounded_file_read.h"

namespace shardline::coordinator {
namespace {
// A manifest lists every tensor's ranges: megabytes for large models, never near this.
constexpr int64_t kMaxManifestBytes = int64_t{256} << 20;
}  // namespace

absl::StatusOr<std::optional<CheckpointManifest>> FetchManifest(const std::string& step_dir,
                                                                absl::Duration timeout) {
  const std::string path = absl::StrCat(step_dir, "/", checkpoint::kManifestFile);
  absl::StatusOr<std::string> text = ReadRegularFileBounded(path, timeout, kMaxManifestBytes);
  if (absl::IsFailedPrecondition(text.status()) || absl::IsDeadlineExceeded(text.status()) ||
      absl::IsOutOfRange(text.status())) {
    return text.status();
  }
  if (!text.ok()) return std::nullopt;  // not shared with this machine, or unreadable here
  absl::StatusOr<CheckpointManifest> manifest = checkpoint::ManifestFromJson(*text, path);
  if (!manifest.ok() || manifest->format_version() != checkpoint::kFormatVersion) {
    return std::nullopt;
  }
  return std::optional<CheckpointManifest>(*std::move(manifest));
}

}  // namespace shardline::coordinator
