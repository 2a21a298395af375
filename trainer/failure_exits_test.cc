// Which exit code each phase's failure gets (trainer/exit_codes.h): the worker daemon and the
// coordinator decide from it whether to restart, so a lost peer must never read as a bad spec
// and a bad checkpoint never as a lost peer.
#include "trainer/failure_exits.h"

#include <signal.h>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "trainer/exit_codes.h"

namespace shardline::trainer {
namespace {

TEST(FailureExits, EachPhaseMapsLostPeersSpecsDataAndBugsToTheirCodes) {
  const absl::Status lost = absl::UnavailableError("lost a peer");
  const absl::Status timeout = absl::DeadlineExceededError("timed out");
  const absl::Status oom = absl::ResourceExhaustedError("cap exceeded");
  const absl::Status bad = absl::InvalidArgumentError("bad value");
  const absl::Status broken = absl::FailedPreconditionError("checkpoint mismatch");

  EXPECT_EQ(FailModel(oom), kExitBadSpec);
  EXPECT_EQ(FailModel(bad), kExitBadSpec);
  EXPECT_EQ(FailEngine(lost), kExitCommFailure);
  EXPECT_EQ(FailEngine(timeout), kExitCommFailure);
  EXPECT_EQ(FailEngine(oom), kExitBadSpec);
  EXPECT_EQ(FailEngine(bad), kExitBadSpec);
  EXPECT_EQ(FailCheckpointDir(bad), kExitCheckpointDirNotShared);
  EXPECT_EQ(FailCheckpointDir(lost), kExitCommFailure);
  EXPECT_EQ(FailCheckpointDir(absl::PermissionDeniedError("read-only")), kExitDataError);
  EXPECT_EQ(FailRestore(lost), kExitCommFailure);
  EXPECT_EQ(FailRestore(broken), kExitDataError);  // not a lost peer
  EXPECT_EQ(FailRestore(absl::NotFoundError("no step_40")), kExitDataError);
  EXPECT_EQ(FailTraining(absl::CancelledError("stop"), SIGTERM), kExitSignalBase + SIGTERM);
  EXPECT_EQ(FailTraining(absl::AbortedError("loss is NaN"), 0), kExitDiverged);
  EXPECT_EQ(FailTraining(lost, 0), kExitCommFailure);
  EXPECT_EQ(FailTraining(bad, 0), kExitDataError);
  EXPECT_EQ(FailTraining(absl::DataLossError("truncated"), 0), kExitDataError);
  EXPECT_EQ(FailTraining(absl::InternalError("bug"), 0), kExitInternal);
  EXPECT_EQ(FailFlags(absl::CancelledError("usage")), kExitOk);
  EXPECT_EQ(FailFlags(bad), kExitBadSpec);
}

}  // namespace
}  // namespace shardline::trainer
