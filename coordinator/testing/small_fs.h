// SmallFs (tests only): a size-limited tmpfs for disk-full tests. It is mounted in a private
// mount namespace of the test process when it can make one (so it vanishes with the process),
// else directly (unmounted by the destructor). Create it before the test starts any thread
// (unshare(CLONE_NEWNS) refuses multi-threaded processes).
//
// Thread safety: none; one test thread.
#ifndef SHARDLINE_COORDINATOR_TESTING_SMALL_FS_H_
#define SHARDLINE_COORDINATOR_TESTING_SMALL_FS_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace shardline::coordinator::testing {

class SmallFs {
 public:
  // Mounts a tmpfs of `bytes` at `dir` (created). Errors: UNAVAILABLE naming why (no
  // privilege to mount): tests skip with that message.
  static absl::StatusOr<std::unique_ptr<SmallFs>> Create(const std::string& dir, int64_t bytes);
  ~SmallFs();

  // Writes a filler file until the file system is full. Errors: INTERNAL for another error.
  absl::Status Fill();
  // Deletes the filler file.
  absl::Status Free();
  const std::string& dir() const { return dir_; }

 private:
  SmallFs(std::string dir, bool own_namespace) : dir_(std::move(dir)), own_ns_(own_namespace) {}
  const std::string dir_;
  const bool own_ns_;
};

}  // namespace shardline::coordinator::testing

#endif  // SHARDLINE_COORDINATOR_TESTING_SMALL_FS_H_
