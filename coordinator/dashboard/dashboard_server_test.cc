// DashboardServer over HTTP with a real CoordinatorCore in memory: logging in with ?token=,
// the cookie, 401 for wrong and missing tokens, the owner rule (403), 404, headers, static
// files, chart.js and other methods.
#include "coordinator/dashboard/dashboard_server.h"

#include <fcntl.h>
#include <httplib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "coordinator/dashboard/testing/core_with_jobs.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shardline::coordinator::dashboard {
namespace {

using ::testing::HasSubstr;
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

TEST_F(DashboardServerTest, ATokenInTheAddressBecomesACookieAndLeavesTheAddress) {
  auto login = Get(absl::StrCat("/job?id=", job_, "&token=alice-token"));
  ASSERT_TRUE(login);
  EXPECT_EQ(login->status, 303);
  EXPECT_EQ(login->get_header_value("Location"), absl::StrCat("/job?id=", job_));
  EXPECT_EQ(login->get_header_value("Set-Cookie"),
            "shardline_token=alice-token; Path=/; HttpOnly; SameSite=Strict");
  auto page = Get(absl::StrCat("/job?id=", job_), {{"Cookie", "shardline_token=alice-token"}});
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_EQ(page->get_header_value("Content-Type"), "text/html; charset=utf-8");
  EXPECT_THAT(page->body, HasSubstr("<script src=\"/static/dashboard.js\" defer></script>"));
  EXPECT_THAT(page->get_header_value("Content-Security-Policy"), HasSubstr("script-src 'self'"));
  EXPECT_EQ(page->get_header_value("X-Content-Type-Options"), "nosniff");
  EXPECT_EQ(page->get_header_value("Referrer-Policy"), "no-referrer");
}

TEST_F(DashboardServerTest, AWrongOrMissingTokenGets401) {
  auto page = Get("/?token=guess");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 401);
  EXPECT_EQ(page->body, "401 wrong token\n");
  EXPECT_TRUE(page->get_header_value("Set-Cookie").empty());
  auto api = Get("/api/jobs", Bearer("guess"));
  ASSERT_TRUE(api);
  EXPECT_EQ(api->status, 401);
  EXPECT_EQ(api->body, "{\"error\":\"wrong token\"}");
  auto cookie = Get("/api/jobs", {{"Cookie", "shardline_token=guess"}});
  ASSERT_TRUE(cookie);
  EXPECT_EQ(cookie->status, 401);
  auto none = Get("/workers");
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 401);
  EXPECT_THAT(none->body, HasSubstr("?token=<your user token>"));
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
  EXPECT_EQ(post->body, "the dashboard answers GET only\n");
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

TEST(DashboardServer, RefusesAMalformedAddress) {
  CoreWithJobs jobs;
  auto s = DashboardServer::Start("no-port", jobs.core(), std::make_shared<const UserTable>());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.status().message(), "dashboard address must be host:port, got \"no-port\"");
}

}  // namespace
}  // namespace shardline::coordinator::dashboard
