#include "coordinator/dashboard/dashboard_server.h"

#include <httplib.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <sstream>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "coordinator/dashboard/static_files.h"

namespace shardline::coordinator::dashboard {
namespace {

constexpr char kJson[] = "application/json; charset=utf-8";
constexpr char kText[] = "text/plain; charset=utf-8";

int HttpCodeOf(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kInvalidArgument:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    default:
      return 503;
  }
}

void SetSecurityHeaders(httplib::Response& res) {
  res.set_header("Content-Security-Policy",
                 "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
                 "img-src 'self' data:; frame-ancestors 'none'");
  res.set_header("X-Content-Type-Options", "nosniff");
  res.set_header("Referrer-Policy", "no-referrer");
  res.set_header("Cache-Control", "no-store");
}

PresentedTokens TokensOf(const httplib::Request& req) {
  PresentedTokens t;
  if (req.has_param("token")) t.query = req.get_param_value("token");
  if (req.has_header("Authorization")) {
    t.bearer = DashboardAuth::TokenFromAuthorization(req.get_header_value("Authorization"));
  }
  if (req.has_header("Cookie")) {
    t.cookie = DashboardAuth::TokenFromCookieHeader(req.get_header_value("Cookie"));
  }
  return t;
}

// The request's path and query without the token parameter (where a login redirects to).
std::string WithoutToken(const httplib::Request& req) {
  std::string query;
  for (const auto& [key, value] : req.params) {
    if (key == "token") continue;
    absl::StrAppend(&query, query.empty() ? "?" : "&", httplib::detail::encode_query_param(key),
                    "=", httplib::detail::encode_query_param(value));
  }
  return req.path + query;
}

void Answer(httplib::Response& res, const absl::StatusOr<std::string>& json) {
  if (json.ok()) {
    res.set_content(*json, kJson);
  } else {
    res.status = HttpCodeOf(json.status());
    res.set_content(DashboardApi::ErrorJson(json.status()), kJson);
  }
}

// The query parameter `name` as a number; `fallback` when absent. Errors: INVALID_ARGUMENT.
absl::StatusOr<int64_t> IntParam(const httplib::Request& req, const char* name, int64_t fallback) {
  if (!req.has_param(name)) return fallback;
  int64_t v = 0;
  if (!absl::SimpleAtoi(req.get_param_value(name), &v)) {
    return absl::InvalidArgumentError(absl::StrCat(name, " must be a number"));
  }
  return v;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DashboardServer>> DashboardServer::Start(
    const std::string& listen, CoordinatorCore* core, std::shared_ptr<const UserTable> users,
    const DashboardOptions& options) {
  std::unique_ptr<DashboardServer> s(new DashboardServer(core, std::move(users)));
  {
    std::ifstream in(options.chart_js_path);
    std::stringstream text;
    text << in.rdbuf();
    s->chart_js_ = in ? text.str() : "";
    if (s->chart_js_.empty()) {
      SL_LOG(WARNING) << "dashboard: cannot read " << options.chart_js_path
                      << " (Debian package libjs-chart.js): pages show no charts";
    }
  }
  DashboardServer* self = s.get();

  // A handler that runs only for a known user; the others get 401.
  using UserHandler = std::function<void(const httplib::Request&, httplib::Response&, const User&)>;
  auto authed = [self](bool page, UserHandler handler) {
    return [self, page, handler = std::move(handler)](const httplib::Request& req,
                                                      httplib::Response& res) {
      SetSecurityHeaders(res);
      const PresentedTokens tokens = TokensOf(req);
      absl::StatusOr<User> user = self->auth_.Identify(tokens);
      if (!user.ok()) {
        res.status = 401;
        if (page) {
          res.set_content(absl::StrCat("401 ", user.status().message(), "\n"), kText);
        } else {
          res.set_content(DashboardApi::ErrorJson(user.status()), kJson);
        }
        return;
      }
      if (page && tokens.query.has_value()) {  // a login: keep the token in the cookie only
        res.set_header("Set-Cookie", DashboardAuth::CookieFor(*tokens.query));
        res.set_redirect(WithoutToken(req), 303);
        return;
      }
      handler(req, res, *user);
    };
  };
  auto page = [authed](const char* file) {
    return authed(true, [file](const httplib::Request&, httplib::Response& res, const User&) {
      res.set_content(FindStaticFile(file)->content, ContentTypeOf(file));
    });
  };
  auto api = [authed](UserHandler handler) { return authed(false, std::move(handler)); };
  const DashboardApi* a = &self->api_;

  auto routes = [&](httplib::Server& http) {
    http.Get("/", page("index.html"));
    http.Get("/job", page("job.html"));
    http.Get("/workers", page("workers.html"));
    http.Get(R"(/static/([A-Za-z0-9_.-]+))",
             [](const httplib::Request& req, httplib::Response& res) {
               SetSecurityHeaders(res);
               const std::string name = req.matches[1].str();
               if (const StaticFile* f = FindStaticFile(name)) {
                 res.set_content(f->content, ContentTypeOf(name));
               } else {
                 res.status = 404;
                 res.set_content("no such file\n", kText);
               }
             });
    http.Get("/chart.js", [self](const httplib::Request&, httplib::Response& res) {
      SetSecurityHeaders(res);
      if (self->chart_js_.empty()) {
        res.status = 404;
        res.set_content("chart.js missing: install Debian's libjs-chart.js\n", kText);
        return;
      }
      res.set_content(self->chart_js_, "text/javascript; charset=utf-8");
    });
    http.Get("/api/whoami", api([a](const httplib::Request&, httplib::Response& res,
                                    const User& u) { res.set_content(a->WhoAmI(u), kJson); }));
    http.Get("/api/jobs",
             api([a](const httplib::Request& req, httplib::Response& res, const User& u) {
               const absl::StatusOr<int64_t> size = IntParam(req, "page_size", 0);
               if (!size.ok()) return Answer(res, size.status());
               Answer(res, a->Jobs(u, *size, req.get_param_value("page_token")));
             }));
    http.Get("/api/workers", api([a](const httplib::Request&, httplib::Response& res,
                                     const User& u) { res.set_content(a->Workers(u), kJson); }));
    http.Get(R"(/api/jobs/([^/]+))",
             api([a](const httplib::Request& req, httplib::Response& res, const User& u) {
               Answer(res, a->Job(u, req.matches[1].str()));
             }));
    http.Get(R"(/api/jobs/([^/]+)/metrics)",
             api([a](const httplib::Request& req, httplib::Response& res, const User& u) {
               Answer(res, a->Metrics(u, req.matches[1].str()));
             }));
    http.Get(R"(/api/jobs/([^/]+)/logs)",
             api([a](const httplib::Request& req, httplib::Response& res, const User& u) {
               const absl::StatusOr<int64_t> after = IntParam(req, "after_seq", 0);
               const absl::StatusOr<int64_t> tail = IntParam(req, "tail", 200);
               for (const auto* p : {&after, &tail}) {
                 if (!p->ok()) return Answer(res, p->status());
               }
               Answer(res, a->Logs(u, req.matches[1].str(), *after,
                                   static_cast<int>(std::clamp<int64_t>(*tail, -1, 1 << 30))));
             }));
    http.Get(R"(/api/jobs/([^/]+)/checkpoints)",
             api([a](const httplib::Request& req, httplib::Response& res, const User& u) {
               Answer(res, a->Checkpoints(u, req.matches[1].str()));
             }));
    http.Get(R"(/api/jobs/([^/]+)/checkpoints/(\d+))",
             api([a](const httplib::Request& req, httplib::Response& res, const User& u) {
               int64_t step = 0;
               if (!absl::SimpleAtoi(req.matches[2].str(), &step)) {
                 Answer(res, absl::InvalidArgumentError("step must be a number"));
                 return;
               }
               Answer(res, a->Checkpoint(u, req.matches[1].str(), step));
             }));
    const httplib::Server::Handler not_allowed = [](const httplib::Request&,
                                                    httplib::Response& res) {
      res.status = 405;
      res.set_content("the dashboard answers GET only\n", kText);
    };
    http.Post(".*", not_allowed);
    http.Put(".*", not_allowed);
    http.Patch(".*", not_allowed);
    http.Delete(".*", not_allowed);
    http.Options(".*", not_allowed);
    http.set_error_handler([](const httplib::Request&, httplib::Response& res) {
      if (res.status == 404 && res.body.empty()) res.set_content("no such page\n", kText);
    });
  };
  auto http = HttpServer::Start(listen, routes, options.http, "dashboard",
                                "--dashboard_threads and --metrics_request_timeout_ms");
  if (!http.ok()) return http.status();
  s->http_ = std::move(*http);
  return s;
}

}  // namespace shardline::coordinator::dashboard
