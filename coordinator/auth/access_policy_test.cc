#include "coordinator/auth/access_policy.h"

#include "gtest/gtest.h"

namespace shardline::coordinator {
namespace {

const User kAlice{"alice", false};
const User kBob{"bob", false};
const User kRoot{"root", true};

TEST(AccessPolicy, OwnerAndAdminMayActOthersNot) {
  EXPECT_TRUE(MayAct(kAlice, "alice"));
  EXPECT_TRUE(MayAct(kRoot, "alice"));
  EXPECT_FALSE(MayAct(kBob, "alice"));
  EXPECT_FALSE(MayAct(kBob, ""));  // an unowned job is an admin's
}

TEST(AccessPolicy, JobAccessNamesTheJobOwnerAndActionAndAskNoOwnerOfAnAdmin) {
  int lookups = 0;
  auto alice_owns = [&]() -> absl::StatusOr<std::string> {
    ++lookups;
    return std::string("alice");
  };
  EXPECT_TRUE(CheckJobAccess(kAlice, "j1", alice_owns, "cancel it").ok());
  EXPECT_TRUE(CheckJobAccess(kRoot, "j1", alice_owns, "cancel it").ok());
  EXPECT_EQ(lookups, 1);
  const absl::Status s = CheckJobAccess(kBob, "j1", alice_owns, "cancel it");
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(s.message(), "job j1 is owned by alice; only its owner or an admin may cancel it");
  const absl::Status unowned = CheckJobAccess(
      kBob, "j2", []() -> absl::StatusOr<std::string> { return std::string(); }, "read its logs");
  EXPECT_NE(unowned.message().find("owned by nobody recorded"), absl::string_view::npos);
  const absl::Status missing = CheckJobAccess(
      kBob, "j3", []() -> absl::StatusOr<std::string> { return absl::NotFoundError("no job j3"); },
      "read its logs");
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
}

TEST(AccessPolicy, ResumeFromNeedsAKnownCheckpointOfAJobTheUserMayActOn) {
  EXPECT_TRUE(CheckResumeFrom(kAlice, "/c/j1/step_2", {"j1", "alice"}).ok());
  EXPECT_TRUE(CheckResumeFrom(kRoot, "/planted", {}).ok());
  const absl::Status unknown = CheckResumeFrom(kAlice, "/planted", {});
  EXPECT_EQ(unknown.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(unknown.message().find("checkpoint.resume_from: /planted is not a committed"),
            absl::string_view::npos);
  const absl::Status other = CheckResumeFrom(kBob, "/c/j1/step_2", {"j1", "alice"});
  EXPECT_EQ(other.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(other.message().find("of job j1, owned by alice"), absl::string_view::npos);
}

TEST(AccessPolicy, InitFromIsAnyonesOutsideJobDirectoriesAndTheOwnersInside) {
  EXPECT_TRUE(
      CheckInitFrom(kBob, "checkpoint.init_from_safetensors", "/models/m.safetensors", {}).ok());
  EXPECT_TRUE(CheckInitFrom(kAlice, "checkpoint.init_from_safetensors", "/c/j1/export.safetensors",
                            {"j1", "alice"})
                  .ok());
  EXPECT_TRUE(CheckInitFrom(kRoot, "checkpoint.init_from_safetensors", "/c/j1/export.safetensors",
                            {"j1", "alice"})
                  .ok());
  const absl::Status s =
      CheckInitFrom(kBob, "checkpoint.init_from_dcp", "/c/j1/dcp", {"j1", "alice"});
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(s.message().find(
                "checkpoint.init_from_dcp: /c/j1/dcp is in the checkpoint directory of job j1"),
            absl::string_view::npos);
}

}  // namespace
}  // namespace shardline::coordinator
