// FileKvStore: a KvStore kept as one file per key in a directory that every rank can see (a
// local temp directory for single-host tests, or a shared file system).
//
// Set writes "<dir>/<escaped key>" through a temporary file and rename(2), so a reader sees
// either no value or the whole value. Get polls the directory every `poll_interval` until all
// keys exist or the timeout passes. Keys are escaped (bytes outside [A-Za-z0-9._-] become %XX),
// so any string is a valid key and no key can escape the directory.
//
// Thread safety: safe to call from several threads and processes at once.
#ifndef SHARDLINE_FSDP_FILE_KV_STORE_H_
#define SHARDLINE_FSDP_FILE_KV_STORE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "fsdp/kv_store.h"

namespace shardline::fsdp {

class FileKvStore : public KvStore {
 public:
  struct Options {
    std::string directory;  // Created (with parents) if missing.
    absl::Duration poll_interval = absl::Milliseconds(5);
  };

  // Errors: INVALID_ARGUMENT for an empty directory; UNAVAILABLE if it cannot be created.
  static absl::StatusOr<std::unique_ptr<FileKvStore>> Create(const Options& options);

  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::vector<std::string>> Get(const std::vector<std::string>& keys,
                                               absl::Duration timeout) override;

 private:
  explicit FileKvStore(Options options) : options_(std::move(options)) {}
  std::string PathFor(absl::string_view key) const;

  const Options options_;
};

}  // namespace shardline::fsdp

#endif  // SHARDLINE_FSDP_FILE_KV_STORE_H_
