// DashboardAuth: which token wins, wrong and missing tokens, no users, cookie round trips.
#include "coordinator/dashboard/auth.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"
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

TEST(DashboardAuth, FindsTheUserOfEachPlaceATokenCanBe) {
  DashboardAuth auth(Users());
  PresentedTokens t;
  t.query = "alice-token";
  auto u = auth.Identify(t);
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->name, "alice");
  EXPECT_FALSE(u->admin);
  t = PresentedTokens();
  t.cookie = "ops-token";
  u = auth.Identify(t);
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->name, "ops");
  EXPECT_TRUE(u->admin);
  t.bearer = "alice-token";  // the header wins over an older cookie
  EXPECT_EQ(auth.Identify(t)->name, "alice");
}

TEST(DashboardAuth, RefusesAWrongTokenEvenBesideAGoodCookie) {
  DashboardAuth auth(Users());
  PresentedTokens t;
  t.query = "guess";
  t.cookie = "alice-token";
  auto u = auth.Identify(t);
  EXPECT_EQ(u.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(u.status().message(), "wrong token");
}

TEST(DashboardAuth, WithoutATokenSaysHowToLogIn) {
  DashboardAuth auth(Users());
  auto u = auth.Identify(PresentedTokens());
  EXPECT_EQ(u.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(std::string(u.status().message()), HasSubstr("?token=<your user token>"));
}

TEST(DashboardAuth, WithoutUsersEveryoneIsTheAnonymousAdminAsInTheApi) {
  DashboardAuth auth(std::make_shared<const UserTable>());
  auto u = auth.Identify(PresentedTokens());
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->name, "anonymous");
  EXPECT_TRUE(u->admin);
}

TEST(DashboardAuth, TheCookieIsHttpOnlyStrictAndRoundTripsAnyToken) {
  const std::string token = "a b;c=d%\"e";
  const std::string cookie = DashboardAuth::CookieFor(token);
  EXPECT_EQ(cookie, "shardline_token=a%20b%3Bc%3Dd%25%22e; Path=/; HttpOnly; SameSite=Strict");
  const std::string header = "other=1; " + cookie.substr(0, cookie.find(';')) + "; more=2";
  EXPECT_EQ(DashboardAuth::TokenFromCookieHeader(header), token);
  EXPECT_EQ(DashboardAuth::TokenFromCookieHeader("other=1"), std::nullopt);
  EXPECT_EQ(DashboardAuth::TokenFromCookieHeader("shardline_token=%4"), std::nullopt);
}

TEST(DashboardAuth, ReadsOnlyBearerAuthorization) {
  EXPECT_EQ(DashboardAuth::TokenFromAuthorization("Bearer xyz"), "xyz");
  EXPECT_EQ(DashboardAuth::TokenFromAuthorization("Basic eHl6"), std::nullopt);
}

}  // namespace
}  // namespace shardline::coordinator::dashboard
