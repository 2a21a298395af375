#include "fsdp/gloo_errors.h"

#include <stdexcept>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gloo/common/error.h"
#include "gloo/common/logging.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shardline::fsdp::gloo_internal {
namespace {

using ::testing::StartsWith;

constexpr char kPrefix[] = "group shard[1] op all_reduce step 7: ";
constexpr char kMembers[] = "(group ranks [2, 3], this is rank 0)";

// StatusFromCurrentException for `thrown`, thrown and caught here.
template <typename E>
absl::Status Translate(const E& thrown) {
  try {
    throw thrown;
  } catch (...) {
    return StatusFromCurrentException(kPrefix, absl::Seconds(10), kMembers);
  }
}

TEST(StatusFromCurrentException, StoreErrorKeepsTheStoresCodeAndMessage) {
  const absl::Status status = Translate(StoreError(absl::UnauthenticatedError("bad secret")));
  EXPECT_EQ(status.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(status.message(), std::string(kPrefix) + "bad secret");
}

TEST(StatusFromCurrentException, GlooTimeoutIsDeadlineExceededNamingTimeoutAndMembers) {
  const absl::Status status = Translate(gloo::IoException("[pair.cc:598] Timed out waiting"));
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(status.message(), std::string(kPrefix) + "timed out after 10s " + kMembers +
                                  ": [pair.cc:598] Timed out waiting");
}

TEST(StatusFromCurrentException, GlooLowercaseTimeoutIsDeadlineExceeded) {
  const absl::Status status = Translate(gloo::IoException("Read timeout [127.0.0.1]:4242"));
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(status.message()), StartsWith(std::string(kPrefix) + "timed out"));
}

TEST(StatusFromCurrentException, GlooIoErrorIsUnavailableNamingMembers) {
  const absl::Status status = Translate(gloo::IoException("Connection reset by peer"));
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(status.message(),
            std::string(kPrefix) + "lost a peer " + kMembers + ": Connection reset by peer");
}

TEST(StatusFromCurrentException, GlooEnforceFailureIsUnavailableNamingMembers) {
  const absl::Status status =
      Translate(gloo::EnforceNotMet("pair.cc", 1, "fd_ != -1", "pair is closed"));
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(status.message()),
              StartsWith(std::string(kPrefix) + "gloo failed " + kMembers + ": "));
}

TEST(StatusFromCurrentException, OtherExceptionIsInternalWithItsMessage) {
  const absl::Status status = Translate(std::runtime_error("out of memory"));
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(status.message(), std::string(kPrefix) + "out of memory");
}

TEST(StatusFromCurrentException, NonStandardExceptionIsInternalUnknown) {
  const absl::Status status = Translate(42);
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(status.message(), std::string(kPrefix) + "unknown exception");
}

}  // namespace
}  // namespace shardline::fsdp::gloo_internal
