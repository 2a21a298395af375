// SessionStore: random ids, the idle timeout and the absolute lifetime, deletion, the bound
// (oldest evicted, expired ones first) and the option checks.
#include "coordinator/dashboard/session_store.h"

#include "common/testing/fake_clock.h"
#include "gtest/gtest.h"

namespace shardline::coordinator::dashboard {
namespace {

SessionOptions Options(int64_t max_sessions = 10) {
  SessionOptions o;
  o.idle_timeout = absl::Minutes(10);
  o.lifetime = absl::Minutes(30);
  o.max_sessions = max_sessions;
  return o;
}

TEST(SessionStore, IdsAreRandomHexAndNameTheirToken) {
  FakeClock clock;
  SessionStore store(Options(), &clock);
  const std::string a = store.Create("alice-token");
  const std::string b = store.Create("alice-token");
  EXPECT_EQ(a.size(), 64u);  // 32 bytes
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_NE(a, b);
  EXPECT_EQ(store.Lookup(a), "alice-token");
  EXPECT_EQ(store.Lookup(b), "alice-token");
  EXPECT_EQ(store.Lookup("alice-token"), std::nullopt);  // a token is no session id
  EXPECT_EQ(store.Lookup(""), std::nullopt);
}

TEST(SessionStore, AnIdleSessionEndsAndUseKeepsItAlive) {
  FakeClock clock;
  SessionStore store(Options(), &clock);
  const std::string used = store.Create("t");
  const std::string idle = store.Create("t");
  clock.Advance(absl::Minutes(9));
  EXPECT_TRUE(store.Lookup(used).has_value());
  clock.Advance(absl::Minutes(2));  // idle: 11 min unused; used: 2 min since its last request
  EXPECT_EQ(store.Lookup(idle), std::nullopt);
  EXPECT_TRUE(store.Lookup(used).has_value());
  EXPECT_EQ(store.size(), 1u);  // the expired one was dropped when looked up
}

TEST(SessionStore, ASessionEndsAtItsLifetimeHoweverOftenItIsUsed) {
  FakeClock clock;
  SessionStore store(Options(), &clock);
  const std::string id = store.Create("t");
  for (int i = 0; i < 5; ++i) {
    clock.Advance(absl::Minutes(5));
    EXPECT_TRUE(store.Lookup(id).has_value()) << i;
  }
  clock.Advance(absl::Minutes(5));  // 30 min after the login
  EXPECT_EQ(store.Lookup(id), std::nullopt);
}

TEST(SessionStore, DeleteEndsASession) {
  FakeClock clock;
  SessionStore store(Options(), &clock);
  const std::string id = store.Create("t");
  EXPECT_TRUE(store.Delete(id));
  EXPECT_EQ(store.Lookup(id), std::nullopt);
  EXPECT_FALSE(store.Delete(id));
  EXPECT_EQ(store.size(), 0u);
}

TEST(SessionStore, PastTheBoundTheOldestGoesExpiredOnesFirst) {
  FakeClock clock;
  SessionStore store(Options(/*max_sessions=*/3), &clock);
  const std::string first = store.Create("1");
  clock.Advance(absl::Minutes(1));
  const std::string second = store.Create("2");
  const std::string third = store.Create("3");
  const std::string fourth = store.Create("4");  // the oldest (first) goes
  EXPECT_EQ(store.size(), 3u);
  EXPECT_EQ(store.Lookup(first), std::nullopt);
  EXPECT_EQ(store.Lookup(second), "2");
  clock.Advance(absl::Minutes(9) + absl::Seconds(30));
  EXPECT_EQ(store.Lookup(second), "2");  // used: stays; third and fourth are idle 9.5 min
  clock.Advance(absl::Minutes(1));       // third and fourth have expired, second has not
  const std::string fifth = store.Create("5");
  EXPECT_EQ(store.size(), 2u);  // the expired ones were swept, not the live oldest
  EXPECT_EQ(store.Lookup(second), "2");
  EXPECT_EQ(store.Lookup(fifth), "5");
}

TEST(SessionStore, ValidateNamesTheFlags) {
  EXPECT_TRUE(SessionStore::Validate(Options()).ok());
  SessionOptions no_idle = Options(), no_lifetime = Options();
  no_idle.idle_timeout = absl::ZeroDuration();
  no_lifetime.lifetime = -absl::Seconds(1);
  for (const SessionOptions& o : {Options(/*max_sessions=*/0), no_idle, no_lifetime}) {
    const absl::Status s = SessionStore::Validate(o);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(s.message(),
              "--dashboard_session_idle_timeout_s, --dashboard_session_lifetime_s and "
              "--dashboard_max_sessions must be positive");
  }
}

}  // namespace
}  // namespace shardline::coordinator::dashboard
