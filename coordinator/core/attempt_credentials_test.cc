#include "coordinator/core/attempt_credentials.h"

#include "gtest/gtest.h"

namespace shardline::coordinator {
namespace {

TEST(AttemptCredentials, FindsTheAttemptUntilItIsRemovedOrReplaced) {
  AttemptCredentials c;
  c.Add("secret-1", {"job-a", 1, "job-a/1"});
  c.Add("secret-b", {"job-b", 1, "job-b/1"});
  auto a = c.Find("secret-1");
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->job_id, "job-a");
  EXPECT_EQ(a->attempt, 1);
  EXPECT_EQ(a->rendezvous_namespace, "job-a/1");
  EXPECT_FALSE(c.Find("").has_value());
  EXPECT_FALSE(c.Find("secret-2").has_value());
  c.Remove("job-a/1");
  EXPECT_FALSE(c.Find("secret-1").has_value());
  EXPECT_TRUE(c.Find("secret-b").has_value());
  c.Add("secret-b2", {"job-b", 1, "job-b/1"});  // the same namespace re-opened
  EXPECT_FALSE(c.Find("secret-b").has_value());
  EXPECT_TRUE(c.Find("secret-b2").has_value());
}

}  // namespace
}  // namespace shardline::coordinator
