// How GlooCommunicator turns Gloo's exceptions into statuses. Implementation of
// GlooCommunicator, not for other callers (Bazel-private to //fsdp).
//
// Gloo reports every failure by throwing, from its rendezvous code and from its collectives;
// GlooCommunicator returns absl::Status. StoreError carries a KvStore status through Gloo's
// rendezvous code (gloo_rendezvous.cc); StatusFromCurrentException, called in the catch blocks
// around bootstrap and around each collective, maps whatever was thrown to the status the
// communicator returns (DEADLINE_EXCEEDED for a timeout, UNAVAILABLE for a lost peer).
//
// Thread safety: pure functions.
#ifndef SHARDLINE_FSDP_GLOO_ERRORS_H_
#define SHARDLINE_FSDP_GLOO_ERRORS_H_

#include <stdexcept>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace shardline::fsdp::gloo_internal {

// Thrown by StoreAdapter through Gloo's rendezvous code (which only knows exceptions) and
// caught again in ConnectGlooMesh (both in gloo_rendezvous.cc).
class StoreError : public std::runtime_error {
 public:
  explicit StoreError(absl::Status status)
      : std::runtime_error(std::string(status.message())), status_(std::move(status)) {}
  const absl::Status& status() const { return status_; }

 private:
  absl::Status status_;
};

// Converts the exception being handled (from Gloo, our store adapter or LibTorch) into a
// status whose message starts with `prefix`; `members` is comm_args.h's DescribeGroupMembers
// for the group. Call only inside a catch block.
absl::Status StatusFromCurrentException(const std::string& prefix, absl::Duration timeout,
                                        const std::string& members);

}  // namespace shardline::fsdp::gloo_internal

#endif  // SHARDLINE_FSDP_GLOO_ERRORS_H_
