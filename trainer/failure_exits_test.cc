// Which exit code each phase's failure gets (launch/exit_codes.h): the worker daemon and the
// coordinator decide from it whether to restart, so a lost peer must never read as a bad spec
// and a bad checkpoint never as a lost peer.
#include "trainer/failure_exits.h"

#include <signal.h>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "launch/exit_codes.h"

namespace shardline::trainer {
namespace {

TEST(FailureExits, EachPhaseMapsLostPeersSpecsDataAndBugsToTheirCodes) {
  const absl::Status lost = absl::UnavailableError("lost a peer");
  const absl::Status timeout = absl::DeadlineExceededError("timed out");
  const absl::Status oom = absl::ResourceExhaustedError("cap exceeded");
  const absl::Status bad = absl::InvalidArgumentError("bad value");
  const absl::Status broken = absl::FailedPreconditionError("checkpoint mismatch");

  EXPECT_EQ(FailModel(oom), launch::kExitBadSpec);
  EXPECT_EQ(FailModel(bad), launch::kExitBadSpec);
  EXPECT_EQ(FailEngine(lost), launch::kExitCommFailure);
  EXPECT_EQ(FailEngine(timeout), launch::kExitCommFailure);
  EXPECT_EQ(FailEngine(oom), launch::kExitBadSpec);
  EXPECT_EQ(FailEngine(bad), launch::kExitBadSpec);
  EXPECT_EQ(FailCheckpointDir(bad), launch::kExitCheckpointDirNotShared);
  EXPECT_EQ(FailCheckpointDir(lost), launch::kExitCommFailure);
  EXPECT_EQ(FailCheckpointDir(absl::PermissionDeniedError("read-only")), launch::kExitDataError);
  EXPECT_EQ(FailRestore(lost), launch::kExitCommFailure);
  EXPECT_EQ(FailRestore(broken), launch::kExitDataError);  // not a lost peer
  EXPECT_EQ(FailRestore(absl::NotFoundError("no step_40")), launch::kExitDataError);
  EXPECT_EQ(FailTraining(absl::CancelledError("stop"), SIGTERM), launch::kExitSignalBase + SIGTERM);
  EXPECT_EQ(FailTraining(absl::AbortedError("loss is NaN"), 0), launch::kExitDiverged);
  EXPECT_EQ(FailTraining(lost, 0), launch::kExitCommFailure);
  EXPECT_EQ(FailTraining(bad, 0), launch::kExitDataError);
  EXPECT_EQ(FailTraining(absl::DataLossError("truncated"), 0), launch::kExitDataError);
  EXPECT_EQ(FailTraining(absl::InternalError("bug"), 0), launch::kExitInternal);
  EXPECT_EQ(FailFlags(absl::CancelledError("usage")), launch::kExitOk);
  EXPECT_EQ(FailFlags(bad), launch::kExitBadSpec);
}

}  // namespace
}  // namespace shardline::trainer
