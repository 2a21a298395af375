#include "cli/target.h"

#include <cstdlib>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace shardline::cli {
namespace {

TEST(ResolveTarget, NoCoordinatorNamesTheLocalClusterDirectoryItLookedIn) {
  unsetenv("SHARDLINE_COORDINATOR");
  unsetenv("SHARDLINE_TOKEN");
  ConnectionOptions o;
  o.config = std::string(std::getenv("TEST_TMPDIR")) + "/no-config";
  o.state_dir = std::string(std::getenv("TEST_TMPDIR")) + "/elsewhere/.cluster";
  auto t = ResolveTarget(o);
  ASSERT_EQ(t.status().code(), absl::StatusCode::kNotFound) << t.status();
  EXPECT_TRUE(absl::StartsWith(t.status().message(),
                               "no coordinator: pass --coordinator=HOST:PORT, set "
                               "$SHARDLINE_COORDINATOR, or start a local cluster"))
      << t.status();
  EXPECT_TRUE(absl::StrContains(t.status().message(),
                                absl::StrCat("(no local cluster in ", o.state_dir, ":")))
      << t.status();
  EXPECT_TRUE(absl::StrContains(t.status().message(), "--state_dir=DIR/.cluster")) << t.status();
}

TEST(ResolveTarget, ARelativeStateDirIsNamedAbsolute) {
  unsetenv("SHARDLINE_COORDINATOR");
  unsetenv("SHARDLINE_TOKEN");
  ConnectionOptions o;
  o.config = std::string(std::getenv("TEST_TMPDIR")) + "/no-config";
  o.state_dir = "no-such-dir/.cluster";
  auto t = ResolveTarget(o);
  ASSERT_EQ(t.status().code(), absl::StatusCode::kNotFound) << t.status();
  EXPECT_TRUE(absl::StrContains(t.status().message(), "/no-such-dir/.cluster:")) << t.status();
  EXPECT_FALSE(absl::StrContains(t.status().message(), "in no-such-dir")) << t.status();
}

TEST(ResolveTarget, CoordinatorFromTheEnvironmentNeedsNoLocalCluster) {
  setenv("SHARDLINE_COORDINATOR", "127.0.0.1:7070", 1);
  ConnectionOptions o;
  o.config = std::string(std::getenv("TEST_TMPDIR")) + "/no-config";
  o.state_dir = "no-such-dir/.cluster";
  auto t = ResolveTarget(o);
  unsetenv("SHARDLINE_COORDINATOR");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->address, "127.0.0.1:7070");
}

}  // namespace
}  // namespace shardline::cli
