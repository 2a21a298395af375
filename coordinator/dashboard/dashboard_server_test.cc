// DashboardServer over HTTP (and HTTPS) with a real CoordinatorCore in memory: logins (the form,
// ?token= from the address bar) opening sessions, the cookie, logout, the Host and same-origin
// checks, 401 for wrong and missing tokens, the owner rule (403), 404, headers, static files,
// chart.js and other methods.
#include "coordinator/dashboard/dashboard_server.h"

#include <fcntl.h>
#include <httplib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "coordinator/dashboard/testing/core_with_jobs.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shardline::coordinator::dashboard {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

std::string TmpFile(const std::string& name, const std::string& text) {
  const std::string path = absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
  unlink(path.c_str());
  const int fd = open(path.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0600);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  close(fd);
  return path;
}

class DashboardServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto users = UserTable::Create(
        TmpFile("users", "alice alice-token\nbob bob-token\nops ops-token admin\n"), "");
    ASSERT_TRUE(users.ok()) << users.status();
    job_ = jobs_.RunningJob("curve", "alice");
    for (int step = 1; step <= 3; ++step) jobs_.Report(job_, step, 3.0);
    DashboardOptions o;
    o.chart_js_path = TmpFile("chart.js", "/* chart */");
    auto s = DashboardServer::Start("127.0.0.1:0", jobs_.core(),
                                    std::shared_ptr<const UserTable>(std::move(*users)), o);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
    const std::string& a = server_->address();
    int port = 0;
    ASSERT_TRUE(absl::SimpleAtoi(a.substr(a.rfind(':') + 1), &port));
    client_ = std::make_unique<httplib::Client>("127.0.0.1", port);
    client_->set_follow_location(false);
  }

  httplib::Result Get(const std::string& path, httplib::Headers headers = {}) {
    return client_->Get(path, headers);
  }
  static httplib::Headers Bearer(const std::string& token) {
    return {{"Authorization", "Bearer " + token}};
  }

  CoreWithJobs jobs_;
  std::string job_;
  std::unique_ptr<DashboardServer> server_;
  std::unique_ptr<httplib::Client> client_;
};

// Sec-Fetch-Site "none": what a browser sends for a URL typed into its address bar.
const httplib::Headers kAddressBar = {{"Sec-Fetch-Site", "none"}};

std::string SessionOf(const httplib::Result& r) {
  const std::string cookie = r->get_header_value("Set-Cookie");
  const size_t eq = cookie.find('='), semi = cookie.find(';');
  return cookie.substr(eq + 1, semi - eq - 1);
}

httplib::Headers Cookie(const std::string& session) {
  return {{"Cookie", "shardline_session=" + session}};
}

TEST_F(DashboardServerTest, AnAddressBarTokenBecomesASessionAndLeavesTheAddress) {
  auto login = Get(absl::StrCat("/job?id=", job_, "&token=alice-token"), kAddressBar);
  ASSERT_TRUE(login);
  EXPECT_EQ(login->status, 303);
  EXPECT_EQ(login->get_header_value("Location"), absl::StrCat("/job?id=", job_));
  const std::string session = SessionOf(login);
  EXPECT_EQ(session.size(), 64u);
  EXPECT_EQ(login->get_header_value("Set-Cookie"),
            absl::StrCat("shardline_session=", session, "; Path=/; HttpOnly; SameSite=Strict"));
  EXPECT_EQ(login->get_header_value("Set-Cookie").find("alice-token"), std::string::npos);
  auto page = Get(absl::StrCat("/job?id=", job_), Cookie(session));
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_EQ(page->get_header_value("Content-Type"), "text/html; charset=utf-8");
  EXPECT_THAT(page->body, HasSubstr("<script src=\"/static/dashboard.js\" defer></script>"));
  EXPECT_THAT(page->body, Not(HasSubstr("alice-token")));
  EXPECT_THAT(page->get_header_value("Content-Security-Policy"), HasSubstr("script-src 'self'"));
  EXPECT_EQ(page->get_header_value("X-Content-Type-Options"), "nosniff");
  EXPECT_EQ(page->get_header_value("Referrer-Policy"), "same-origin");
  auto me = Get("/api/whoami", Cookie(session));
  ASSERT_TRUE(me);
  EXPECT_EQ(me->body, "{\"user\":\"alice\",\"admin\":false}");
}

TEST_F(DashboardServerTest, ATokenLinkFromAnotherPageIsNoLoginAndNeverReplacesASession) {
  for (const httplib::Headers& h :
       {httplib::Headers{{"Sec-Fetch-Site", "cross-site"}}, httplib::Headers{}}) {
    auto linked = Get("/?token=alice-token", h);
    ASSERT_TRUE(linked);
    EXPECT_EQ(linked->status, 403);
    EXPECT_THAT(linked->body, HasSubstr("a ?token= login is taken only from the address bar"));
    EXPECT_TRUE(linked->get_header_value("Set-Cookie").empty());
  }
  const std::string alice = SessionOf(Get("/?token=alice-token", kAddressBar));
  httplib::Headers h = Cookie(alice);
  h.emplace("Sec-Fetch-Site", "none");
  auto as_bob = Get("/?token=bob-token", h);
  ASSERT_TRUE(as_bob);
  EXPECT_EQ(as_bob->status, 409);
  EXPECT_THAT(as_bob->body, HasSubstr("already signed in as alice: sign out first"));
  EXPECT_TRUE(as_bob->get_header_value("Set-Cookie").empty());
  auto again = Get("/?token=alice-token", h);  // the same user: no new session
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 303);
  EXPECT_TRUE(again->get_header_value("Set-Cookie").empty());
  EXPECT_EQ(Get("/api/whoami", Cookie(alice))->body, "{\"user\":\"alice\",\"admin\":false}");
}

TEST_F(DashboardServerTest, TheLoginFormTakesOnlySameOriginPostsAndLogoutEndsTheSession) {
  auto form = Get("/login");
  ASSERT_TRUE(form);
  EXPECT_EQ(form->status, 200);
  EXPECT_THAT(form->body, HasSubstr("<form class=\"login\" method=\"post\" action=\"/login\">"));
  const std::string origin = "http://" + server_->address();
  auto cross = client_->Post("/login", {{"Origin", "http://evil.example"}}, "token=bob-token",
                             "application/x-www-form-urlencoded");
  ASSERT_TRUE(cross);
  EXPECT_EQ(cross->status, 403);
  EXPECT_THAT(cross->body, HasSubstr("cross-origin request refused"));
  EXPECT_TRUE(cross->get_header_value("Set-Cookie").empty());
  auto wrong = client_->Post("/login", {{"Origin", origin}}, "token=guess",
                             "application/x-www-form-urlencoded");
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 401);
  EXPECT_EQ(wrong->body, "401 wrong token\n");
  auto login = client_->Post("/login", {{"Origin", origin}}, "token=bob-token",
                             "application/x-www-form-urlencoded");
  ASSERT_TRUE(login);
  EXPECT_EQ(login->status, 303);
  EXPECT_EQ(login->get_header_value("Location"), "/");
  const std::string bob = SessionOf(login);
  EXPECT_EQ(Get("/api/whoami", Cookie(bob))->body, "{\"user\":\"bob\",\"admin\":false}");
  // A forced logout from another site is refused too.
  httplib::Headers evil = Cookie(bob);
  evil.emplace("Origin", "http://evil.example");
  EXPECT_EQ(client_->Post("/logout", evil, "", "application/x-www-form-urlencoded")->status, 403);
  httplib::Headers mine = Cookie(bob);
  mine.emplace("Origin", origin);
  auto logout = client_->Post("/logout", mine, "", "application/x-www-form-urlencoded");
  ASSERT_TRUE(logout);
  EXPECT_EQ(logout->status, 303);
  EXPECT_EQ(logout->get_header_value("Location"), "/login");
  EXPECT_THAT(logout->get_header_value("Set-Cookie"),
              HasSubstr("shardline_session=; Path=/; Max-Age=0"));
  auto after = Get("/api/whoami", Cookie(bob));  // the stolen cookie after logout
  ASSERT_TRUE(after);
  EXPECT_EQ(after->status, 401);
  EXPECT_THAT(after->body, HasSubstr("no such session"));
}

TEST_F(DashboardServerTest, AForeignHostGets421) {
  for (const std::string path : {"/", "/api/jobs", "/login", "/static/style.css"}) {
    httplib::Headers h = Bearer("alice-token");
    h.emplace("Host", "evil.example:80");
    auto r = Get(path, h);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 421) << path;
    EXPECT_THAT(r->body, HasSubstr("evil.example:80"));
    EXPECT_THAT(r->body, HasSubstr("is not this dashboard's address"));
  }
  httplib::Headers local = Bearer("alice-token");
  local.emplace("Host",
                "localhost:" + server_->address().substr(server_->address().rfind(':') + 1));
  EXPECT_EQ(Get("/api/jobs", local)->status, 200);
}

TEST_F(DashboardServerTest, AWrongOrMissingTokenGets401) {
  auto page = Get("/?token=guess", kAddressBar);
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 401);
  EXPECT_EQ(page->body, "401 wrong token\n");
  EXPECT_TRUE(page->get_header_value("Set-Cookie").empty());
  auto api = Get("/api/jobs", Bearer("guess"));
  ASSERT_TRUE(api);
  EXPECT_EQ(api->status, 401);
  EXPECT_EQ(api->body, "{\"error\":\"wrong token\"}");
  // The raw token in a cookie (what the old cookie held) is no session.
  for (const char* cookie : {"shardline_session=alice-token", "shardline_token=alice-token"}) {
    auto raw = Get("/api/jobs", {{"Cookie", cookie}});
    ASSERT_TRUE(raw);
    EXPECT_EQ(raw->status, 401) << cookie;
  }
  auto none = Get("/workers");
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 401);
  EXPECT_THAT(none->body, HasSubstr("sign in at /login"));
}

TEST_F(DashboardServerTest, TheApiKeepsTheOwnerRule) {
  auto jobs = Get("/api/jobs", Bearer("bob-token"));
  ASSERT_TRUE(jobs);
  EXPECT_EQ(jobs->status, 200);
  EXPECT_EQ(jobs->get_header_value("Content-Type"), "application/json; charset=utf-8");
  EXPECT_THAT(jobs->body, HasSubstr(job_));
  auto job = Get("/api/jobs/" + job_, Bearer("bob-token"));
  ASSERT_TRUE(job);
  EXPECT_EQ(job->status, 200);
  EXPECT_THAT(job->body, HasSubstr("\"may_read\":false}"));
  for (const std::string what : {"metrics", "logs", "checkpoints", "checkpoints/1"}) {
    auto denied = Get(absl::StrCat("/api/jobs/", job_, "/", what), Bearer("bob-token"));
    ASSERT_TRUE(denied);
    EXPECT_EQ(denied->status, 403) << what;
    EXPECT_THAT(denied->body, HasSubstr("is owned by alice; only its owner or an admin may"));
    auto allowed = Get(absl::StrCat("/api/jobs/", job_, "/", what), Bearer("ops-token"));
    ASSERT_TRUE(allowed);
    // The checkpoint was never reported: NOT_FOUND for the admin.
    EXPECT_EQ(allowed->status, what == "checkpoints/1" ? 404 : 200) << what << allowed->body;
  }
  auto metrics = Get(absl::StrCat("/api/jobs/", job_, "/metrics"), Bearer("alice-token"));
  ASSERT_TRUE(metrics);
  EXPECT_THAT(metrics->body, HasSubstr("\"reported_steps\":\"3\""));
  auto unknown = Get("/api/jobs/job-nope", Bearer("alice-token"));
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 404);
  auto bad_tail = Get(absl::StrCat("/api/jobs/", job_, "/logs?tail=0"), Bearer("alice-token"));
  ASSERT_TRUE(bad_tail);
  EXPECT_EQ(bad_tail->status, 400);
  EXPECT_EQ(bad_tail->body, "{\"error\":\"tail must be between 1 and 1000, got 0\"}");
  auto not_a_number =
      Get(absl::StrCat("/api/jobs/", job_, "/logs?after_seq=x"), Bearer("alice-token"));
  ASSERT_TRUE(not_a_number);
  EXPECT_EQ(not_a_number->status, 400);
  EXPECT_EQ(not_a_number->body, "{\"error\":\"after_seq must be a number\"}");
  auto me = Get("/api/whoami", Bearer("ops-token"));
  ASSERT_TRUE(me);
  EXPECT_EQ(me->body, "{\"user\":\"ops\",\"admin\":true}");
}

TEST_F(DashboardServerTest, ServesStaticFilesAndChartJsWithoutAUser) {
  auto js = Get("/static/dashboard.js");
  ASSERT_TRUE(js);
  EXPECT_EQ(js->status, 200);
  EXPECT_EQ(js->get_header_value("Content-Type"), "text/javascript; charset=utf-8");
  EXPECT_THAT(js->body, StartsWith("// The dashboard's pages"));
  auto css = Get("/static/style.css");
  ASSERT_TRUE(css);
  EXPECT_EQ(css->get_header_value("Content-Type"), "text/css; charset=utf-8");
  auto chart = Get("/chart.js");
  ASSERT_TRUE(chart);
  EXPECT_EQ(chart->body, "/* chart */");
  auto missing = Get("/static/nope.js");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  auto other = Get("/nope");
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 404);
  auto post = client_->Post("/api/jobs", "{}", "application/json");
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 405);
  EXPECT_EQ(post->body, "the dashboard answers GET only (and POST /login, /logout)\n");
}

TEST(DashboardServer, WithoutChartJsThePagesStillServe) {
  CoreWithJobs jobs;
  DashboardOptions o;
  o.chart_js_path = "/nonexistent/chart.min.js";
  auto s =
      DashboardServer::Start("127.0.0.1:0", jobs.core(), std::make_shared<const UserTable>(), o);
  ASSERT_TRUE(s.ok()) << s.status();
  const std::string& a = (*s)->address();
  httplib::Client client("127.0.0.1", std::stoi(a.substr(a.rfind(':') + 1)));
  auto chart = client.Get("/chart.js");
  ASSERT_TRUE(chart);
  EXPECT_EQ(chart->status, 404);
  EXPECT_EQ(chart->body, "chart.js missing: install Debian's libjs-chart.js\n");
  auto page = client.Get("/");  // no users: open, as the API is
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// With the coordinator's certificate the port speaks HTTPS only and the cookie is Secure.
TEST(DashboardServer, ServesHttpsWithTheCertificateAndSecureCookies) {
  const std::string d = std::getenv("TEST_TMPDIR");
  if (std::system(("openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=127.0.0.1 "
                   "-addext subjectAltName=IP:127.0.0.1 -keyout " +
                   d + "/dash.key -out " + d + "/dash.pem >/dev/null 2>&1")
                      .c_str()) != 0) {
    GTEST_SKIP() << "the openssl command could not make a test certificate";
  }
  auto users = UserTable::Create(TmpFile("tls-users", "alice alice-token\n"), "");
  ASSERT_TRUE(users.ok()) << users.status();
  CoreWithJobs jobs;
  DashboardOptions o;
  o.tls_cert_pem = ReadAll(d + "/dash.pem");
  o.tls_key_pem = ReadAll(d + "/dash.key");
  auto s = DashboardServer::Start("127.0.0.1:0", jobs.core(),
                                  std::shared_ptr<const UserTable>(std::move(*users)), o);
  ASSERT_TRUE(s.ok()) << s.status();
  const int port = std::stoi((*s)->address().substr((*s)->address().rfind(':') + 1));
  httplib::SSLClient tls("127.0.0.1", port);
  tls.set_ca_cert_path((d + "/dash.pem").c_str());
  tls.enable_server_certificate_verification(true);
  auto login = tls.Get("/?token=alice-token", kAddressBar);
  ASSERT_TRUE(login) << httplib::to_string(login.error());
  EXPECT_EQ(login->status, 303);
  EXPECT_THAT(login->get_header_value("Set-Cookie"),
              HasSubstr("; HttpOnly; SameSite=Strict; Secure"));
  auto me = tls.Get("/api/whoami", Cookie(SessionOf(login)));
  ASSERT_TRUE(me);
  EXPECT_EQ(me->body, "{\"user\":\"alice\",\"admin\":false}");
  httplib::Client plain("127.0.0.1", port);  // plain HTTP to the TLS port gets no answer
  plain.set_read_timeout(2, 0);
  EXPECT_FALSE(plain.Get("/login"));
  DashboardOptions bad = o;
  bad.tls_key_pem = "not a key";
  auto refused =
      DashboardServer::Start("127.0.0.1:0", jobs.core(), std::make_shared<const UserTable>(), bad);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(refused.status().message(),
            "dashboard TLS: the private key does not load (--tls_cert / --tls_key)");
}

TEST(DashboardServer, RefusesAMalformedAddress) {
  CoreWithJobs jobs;
  auto s = DashboardServer::Start("no-port", jobs.core(), std::make_shared<const UserTable>());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.status().message(), "dashboard address must be host:port, got \"no-port\"");
}

}  // namespace
}  // namespace shardline::coordinator::dashboard
