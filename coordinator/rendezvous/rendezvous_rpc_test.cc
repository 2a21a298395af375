#include "coordinator/rendezvous/rendezvous_rpc.h"

#include "gtest/gtest.h"

namespace shardline::coordinator {
namespace {

RendezvousGetRequest GetReq(int timeout_ms, std::vector<std::string> keys) {
  RendezvousGetRequest req;
  req.set_namespace_("job-1/1");
  req.set_secret("s3cret");
  req.set_timeout_ms(timeout_ms);
  for (const std::string& k : keys) req.add_keys(k);
  return req;
}

TEST(RendezvousRpc, SetThenGetReturnsValuesInKeyOrder) {
  RendezvousStore store;
  store.Open("job-1/1", "s3cret");
  for (const auto& [k, v] : {std::pair<std::string, std::string>{"a", "1"}, {"b", "2"}}) {
    RendezvousSetRequest set;
    set.set_namespace_("job-1/1");
    set.set_secret("s3cret");
    set.set_key(k);
    set.set_value(v);
    ASSERT_TRUE(ServeRendezvousSet(&store, set).ok());
  }
  auto got = ServeRendezvousGet(&store, GetReq(0, {"b", "a"}), absl::Seconds(60));
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->values_size(), 2);
  EXPECT_EQ(got->values(0), "2");
  EXPECT_EQ(got->values(1), "1");
  RendezvousSetRequest wrong;
  wrong.set_namespace_("job-1/1");
  wrong.set_secret("guess");
  wrong.set_key("c");
  EXPECT_EQ(ServeRendezvousSet(&store, wrong).code(), absl::StatusCode::kPermissionDenied);
}

TEST(RendezvousRpc, WaitIsTheRequestsTimeoutCappedAndNeverNegative) {
  EXPECT_EQ(RendezvousWaitFor(GetReq(500, {}), absl::Seconds(60)), absl::Milliseconds(500));
  EXPECT_EQ(RendezvousWaitFor(GetReq(120000, {}), absl::Seconds(60)), absl::Seconds(60));
  EXPECT_EQ(RendezvousWaitFor(GetReq(-5, {}), absl::Seconds(60)), absl::ZeroDuration());
}

TEST(RendezvousRpc, NegativeTimeoutIsInvalidAndMissingKeysTimeOut) {
  RendezvousStore store;
  store.Open("job-1/1", "s3cret");
  auto bad = ServeRendezvousGet(&store, GetReq(-1, {"a"}), absl::Seconds(60));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "timeout_ms: must be >= 0, got -1");
  auto late = ServeRendezvousGet(&store, GetReq(10, {"a"}), absl::Seconds(60));
  EXPECT_EQ(late.status().code(), absl::StatusCode::kDeadlineExceeded);
  // A poll never waits; its message names how long the caller has polled.
  auto poll = ServeRendezvousPoll(&store, GetReq(5000, {"a"}), absl::Seconds(3));
  EXPECT_EQ(poll.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(poll.status().message(), "rendezvous namespace job-1/1: keys [a] missing after 3s");
}

}  // namespace
}  // namespace shardline::coordinator
