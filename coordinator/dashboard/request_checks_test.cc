// The Host check (DNS rebinding), the same-origin check of the POSTs (login CSRF) and the
// address-bar-only ?token= login.
#include "coordinator/dashboard/request_checks.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shardline::coordinator::dashboard {
namespace {

using ::testing::HasSubstr;

TEST(HostCheck, OnLoopbackTakesItsAddressAndLocalhostWithItsPort) {
  auto c = HostCheck::Create("127.0.0.1:8080", {});
  ASSERT_TRUE(c.ok()) << c.status();
  for (const char* h : {"127.0.0.1:8080", "localhost:8080", "LocalHost:8080", "[::1]:8080"}) {
    EXPECT_TRUE(c->Check(std::string(h)).ok()) << h;
  }
  for (const char* h : {"evil.example:8080", "127.0.0.1:9090", "localhost", "evil.example"}) {
    const absl::Status s = c->Check(std::string(h));
    EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << h;
    EXPECT_THAT(std::string(s.message()), HasSubstr("--dashboard_host")) << h;
  }
  EXPECT_EQ(c->Check(std::nullopt).code(), absl::StatusCode::kPermissionDenied);
}

TEST(HostCheck, ConfiguredNamesMatchAnyPortOrTheirOwn) {
  auto c = HostCheck::Create("0.0.0.0:8080", {"dash.example.com", "proxy.example.com:443"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->empty());
  for (const char* h : {"dash.example.com", "dash.example.com:8080", "proxy.example.com:443"}) {
    EXPECT_TRUE(c->Check(std::string(h)).ok()) << h;
  }
  for (const char* h :
       {"0.0.0.0:8080", "localhost:8080", "proxy.example.com", "dash.example.com.evil.example"}) {
    EXPECT_FALSE(c->Check(std::string(h)).ok()) << h;
  }
  EXPECT_TRUE(HostCheck::Create("0.0.0.0:8080", {})->empty());
  EXPECT_TRUE(HostCheck::Create("10.1.2.3:8080", {})->Check(std::string("10.1.2.3:8080")).ok());
}

TEST(HostCheck, RefusesAMalformedName) {
  for (const char* bad : {"", "a/b", "user@host", "host:port"}) {
    auto c = HostCheck::Create("127.0.0.1:1", {bad});
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(CheckSameOrigin, TakesOnlyThisDashboardsOrigin) {
  const std::string host = "127.0.0.1:8080";
  EXPECT_TRUE(
      CheckSameOrigin(std::string("http://127.0.0.1:8080"), std::nullopt, "http", host).ok());
  EXPECT_TRUE(CheckSameOrigin(std::nullopt, std::string("same-origin"), "http", host).ok());
  for (const char* origin : {"http://evil.example", "null", "https://127.0.0.1:8080"}) {
    const absl::Status s =
        CheckSameOrigin(std::string(origin), std::string("same-origin"), "http", host);
    EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << origin;
    EXPECT_THAT(std::string(s.message()), HasSubstr("cross-origin request refused")) << origin;
  }
  EXPECT_FALSE(CheckSameOrigin(std::nullopt, std::string("cross-site"), "http", host).ok());
  EXPECT_FALSE(CheckSameOrigin(std::nullopt, std::nullopt, "http", host).ok());
}

TEST(CheckAddressBarLogin, TakesOnlyANavigationTheUserStarted) {
  EXPECT_TRUE(CheckAddressBarLogin(std::string("none")).ok());
  for (const char* site : {"cross-site", "same-site", "same-origin"}) {
    const absl::Status s = CheckAddressBarLogin(std::string(site));
    EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << site;
    EXPECT_THAT(std::string(s.message()), HasSubstr("sign in with the form at /login"));
  }
  EXPECT_THAT(std::string(CheckAddressBarLogin(std::nullopt).message()),
              HasSubstr("sends no Sec-Fetch-Site"));
}

}  // namespace
}  // namespace shardline::coordinator::dashboard
