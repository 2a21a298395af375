#include "worker/trainer_user.h"

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace shardline::worker {
namespace {

// Debian's unprivileged "nobody" (uid 65534) stands in for the trainer user: it exists on every
// machine these tests run on, and switching to it needs root, which CI has.
constexpr char kUser[] = "nobody";

bool CanSwitchUsers() { return geteuid() == 0 && getpwnam(kUser) != nullptr; }

// A directory anyone may search (TEST_TMPDIR lies under root's 0700 home here).
std::string OpenDir() {
  char tmpl[] = "/tmp/trainer_user_test_XXXXXX";
  const char* dir = mkdtemp(tmpl);
  EXPECT_NE(dir, nullptr);
  chmod(dir, 0755);
  return dir;
}

std::string WriteFile(const std::string& path, mode_t mode) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, mode);
  EXPECT_GE(fd, 0) << path;
  EXPECT_EQ(write(fd, "secret\n", 7), 7);
  fchmod(fd, mode);
  close(fd);
  return path;
}

TEST(TrainerUser, RefusedUnlessRootAndAnUnprivilegedUserThatExists) {
  if (geteuid() != 0) {
    auto u = ResolveTrainerUser(kUser);
    ASSERT_FALSE(u.ok());
    EXPECT_TRUE(absl::StrContains(u.status().message(), "not root")) << u.status();
    return;
  }
  auto missing = ResolveTrainerUser("no-such-user-shardline");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(missing.status().message(),
                                "--trainer_user no-such-user-shardline: no such user"))
      << missing.status();
  auto root = ResolveTrainerUser("root");
  ASSERT_FALSE(root.ok());
  EXPECT_TRUE(absl::StrContains(root.status().message(), "is root (uid 0)")) << root.status();
}

TEST(TrainerUser, ChecksRunAsTheUserAndNameTheFlagAndPath) {
  if (!CanSwitchUsers()) GTEST_SKIP() << "needs root and the user " << kUser;
  auto user = ResolveTrainerUser(kUser);
  ASSERT_TRUE(user.ok()) << user.status();
  EXPECT_NE(user->uid, 0u);
  const std::string dir = OpenDir();
  const std::string secret = WriteFile(dir + "/join.token", 0600);
  EXPECT_TRUE(CheckTrainerUser(*user, {"/bin/true", dir, {"/tmp"}, {secret, ""}}).ok());

  // A credential the trainer user can read.
  const std::string readable = WriteFile(dir + "/node.key", 0644);
  absl::Status s = CheckTrainerUser(*user, {"/bin/true", dir, {}, {secret, readable}});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "can read credential file " + readable)) << s;

  // A work directory under a directory it cannot search (root's 0700 home).
  s = CheckTrainerUser(*user, {"/bin/true", "/root", {}, {}});
  EXPECT_TRUE(absl::StrContains(s.message(), "cannot reach --work_dir /root: Permission denied"))
      << s;

  // A trainer it may not run, and a checkpoint root it may not write.
  const std::string private_bin = WriteFile(dir + "/trainer", 0700);
  s = CheckTrainerUser(*user, {private_bin, dir, {}, {}});
  EXPECT_TRUE(absl::StrContains(s.message(), "cannot run --trainer " + private_bin)) << s;
  s = CheckTrainerUser(*user, {"/bin/true", dir, {dir}, {}});
  EXPECT_TRUE(absl::StrContains(s.message(), "cannot write under --checkpoint_roots " + dir)) << s;
}

}  // namespace
}  // namespace shardline::worker
