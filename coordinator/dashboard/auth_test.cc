// DashboardAuth: logins open sessions, which credential wins, logout and expiry, wrong and
// missing credentials, no users, the cookie's attributes.
#include "coordinator/dashboard/auth.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "common/testing/fake_clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shardline::coordinator::dashboard {
namespace {

using ::testing::HasSubstr;

std::shared_ptr<const UserTable> Users() {
  const std::string path = absl::StrCat(std::getenv("TEST_TMPDIR"), "/dashboard_users");
  unlink(path.c_str());
  const std::string text = "alice alice-token\nops ops-token admin\n";
  const int fd = open(path.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0600);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  close(fd);
  auto users = UserTable::Create(path, "");
  EXPECT_TRUE(users.ok()) << users.status();
  return std::shared_ptr<const UserTable>(std::move(*users));
}

DashboardAuth Auth(std::shared_ptr<const UserTable> users, const FakeClock* clock) {
  SessionOptions o;
  o.idle_timeout = absl::Minutes(10);
  o.lifetime = absl::Hours(1);
  return DashboardAuth(std::move(users), o, clock);
}

TEST(DashboardAuth, ALoginExchangesTheTokenForASession) {
  FakeClock clock;
  DashboardAuth auth = Auth(Users(), &clock);
  absl::StatusOr<std::string> id = auth.Login("alice-token");
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_NE(*id, "alice-token");
  EXPECT_EQ(id->find("alice"), std::string::npos);
  Credentials c;
  c.session = *id;
  auto u = auth.Identify(c);
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->name, "alice");
  EXPECT_FALSE(u->admin);
  c.bearer = "ops-token";  // the header wins over the cookie
  EXPECT_EQ(auth.Identify(c)->name, "ops");
  EXPECT_EQ(auth.Login("guess").status().message(), "wrong token");
  EXPECT_EQ(auth.sessions(), 1u);
}

TEST(DashboardAuth, TheRawTokenInTheCookieIsNoSession) {
  FakeClock clock;
  DashboardAuth auth = Auth(Users(), &clock);
  Credentials c;
  c.session = "alice-token";
  auto u = auth.Identify(c);
  EXPECT_EQ(u.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(std::string(u.status().message()), HasSubstr("no such session"));
}

TEST(DashboardAuth, LogoutAndTheIdleTimeoutEndTheSession) {
  FakeClock clock;
  DashboardAuth auth = Auth(Users(), &clock);
  Credentials c;
  c.session = *auth.Login("alice-token");
  auth.Logout(*c.session);
  EXPECT_EQ(auth.Identify(c).status().code(), absl::StatusCode::kUnauthenticated);
  c.session = *auth.Login("alice-token");
  clock.Advance(absl::Minutes(11));
  EXPECT_EQ(auth.Identify(c).status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(auth.sessions(), 0u);
}

TEST(DashboardAuth, RefusesAWrongBearerEvenBesideAGoodSession) {
  FakeClock clock;
  DashboardAuth auth = Auth(Users(), &clock);
  Credentials c;
  c.session = *auth.Login("alice-token");
  c.bearer = "guess";
  auto u = auth.Identify(c);
  EXPECT_EQ(u.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(u.status().message(), "wrong token");
}

TEST(DashboardAuth, WithoutCredentialsSaysHowToSignIn) {
  DashboardAuth auth = Auth(Users(), nullptr);
  auto u = auth.Identify(Credentials());
  EXPECT_EQ(u.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(std::string(u.status().message()), HasSubstr("sign in at /login"));
}

TEST(DashboardAuth, WithoutUsersEveryoneIsTheAnonymousAdminAsInTheApi) {
  DashboardAuth auth = Auth(std::make_shared<const UserTable>(), nullptr);
  EXPECT_TRUE(auth.open());
  auto u = auth.Identify(Credentials());
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->name, "anonymous");
  EXPECT_TRUE(u->admin);
}

TEST(DashboardAuth, TheCookieHoldsTheIdHttpOnlyStrictAndSecureOverTls) {
  EXPECT_EQ(DashboardAuth::CookieFor("abc123", false),
            "shardline_session=abc123; Path=/; HttpOnly; SameSite=Strict");
  EXPECT_EQ(DashboardAuth::CookieFor("abc123", true),
            "shardline_session=abc123; Path=/; HttpOnly; SameSite=Strict; Secure");
  EXPECT_EQ(DashboardAuth::ExpiredCookie(true),
            "shardline_session=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict; Secure");
  EXPECT_EQ(DashboardAuth::SessionFromCookieHeader("other=1; shardline_session=abc; more=2"),
            "abc");
  EXPECT_EQ(DashboardAuth::SessionFromCookieHeader("other=1"), std::nullopt);
  // The old cookie (which held the token itself) is not read.
  EXPECT_EQ(DashboardAuth::SessionFromCookieHeader("shardline_token=alice-token"), std::nullopt);
}

TEST(DashboardAuth, ReadsOnlyBearerAuthorization) {
  EXPECT_EQ(DashboardAuth::TokenFromAuthorization("Bearer xyz"), "xyz");
  EXPECT_EQ(DashboardAuth::TokenFromAuthorization("Basic eHl6"), std::nullopt);
}

}  // namespace
}  // namespace shardline::coordinator::dashboard
