#include "coordinator/dashboard/dashboard_server.h"

#include <httplib.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <sstream>
#include <utility>

#include "absl/strings/match.h"
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
  // "same-origin", not "no-referrer": with no-referrer a browser sends "Origin: null" on the
  // login and logout form POSTs, which the same-origin check must refuse. Other sites still get
  // no referrer.
  res.set_header("Referrer-Policy", "same-origin");
  res.set_header("Cache-Control", "no-store");
}

std::optional<std::string> HeaderOf(const httplib::Request& req, const char* name) {
  if (!req.has_header(name)) return std::nullopt;
  return req.get_header_value(name);
}

Credentials CredentialsOf(const httplib::Request& req) {
  Credentials c;
  if (req.has_header("Authorization")) {
    c.bearer = DashboardAuth::TokenFromAuthorization(req.get_header_value("Authorization"));
  }
  if (req.has_header("Cookie")) {
    c.session = DashboardAuth::SessionFromCookieHeader(req.get_header_value("Cookie"));
  }
  return c;
}

// A refusal as text (pages, login) or JSON (/api).
void Refuse(httplib::Response& res, int code, const absl::Status& why, bool json) {
  res.status = code;
  if (json) {
    res.set_content(DashboardApi::ErrorJson(why), kJson);
  } else {
    res.set_content(absl::StrCat(code, " ", why.message(), "\n"), kText);
  }
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
  if (absl::Status v = SessionStore::Validate(options.sessions); !v.ok()) return v;
  std::unique_ptr<DashboardServer> s(new DashboardServer(core, std::move(users), options));
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
  auto routes = [self](httplib::Server& http) {
    // Before any route: a Host that is not the dashboard's gets 421 (DNS rebinding).
    http.set_pre_routing_handler([self](const httplib::Request& req, httplib::Response& res) {
      SetSecurityHeaders(res);
      const absl::Status host = self->hosts_->Check(HeaderOf(req, "Host"));
      if (host.ok()) return httplib::Server::HandlerResponse::Unhandled;
      Refuse(res, 421, host, absl::StartsWith(req.path, "/api/"));
      return httplib::Server::HandlerResponse::Handled;
    });
    self->AddLogin(http);
    self->AddPages(http);
    self->AddApi(http);
    const httplib::Server::Handler not_allowed = [](const httplib::Request&,
                                                    httplib::Response& res) {
      res.status = 405;
      res.set_content("the dashboard answers GET only (and POST /login, /logout)\n", kText);
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
  HttpServerOptions http_options = options.http;
  http_options.tls_cert_pem = options.tls_cert_pem;
  http_options.tls_key_pem = options.tls_key_pem;
  auto http = HttpServer::Start(listen, routes, http_options, "dashboard",
                                "--dashboard_threads and --metrics_request_timeout_ms",
                                [&](absl::string_view bound) -> absl::Status {
                                  auto hosts = HostCheck::Create(bound, options.hosts);
                                  if (!hosts.ok()) return hosts.status();
                                  self->hosts_ = *std::move(hosts);
                                  return absl::OkStatus();
                                });
  if (!http.ok()) return http.status();
  s->http_ = std::move(*http);
  if (s->hosts_->empty()) {
    SL_LOG(WARNING) << "dashboard on " << s->http_->address()
                    << " answers no Host (a wildcard address): name it with --dashboard_host";
  }
  return s;
}

bool DashboardServer::AddressBarLogin(const httplib::Request& req, httplib::Response& res) {
  if (auth_.open()) {  // nothing to sign in to: just drop the token from the address
    res.set_redirect(WithoutToken(req), 303);
    return false;
  }
  if (absl::Status s = CheckAddressBarLogin(HeaderOf(req, "Sec-Fetch-Site")); !s.ok()) {
    Refuse(res, 403, s, false);
    return false;
  }
  const std::string token = req.get_param_value("token");
  const Credentials current = CredentialsOf(req);
  if (current.session.has_value()) {
    if (std::optional<User> u = auth_.SessionUser(*current.session)) {
      // Never replaced silently: a link could otherwise swap the victim's session for the
      // attacker's. The same user's login is a no-op.
      const std::optional<User> wanted = auth_.UserOf(token);
      if (wanted.has_value() && wanted->name == u->name) {
        res.set_redirect(WithoutToken(req), 303);
        return false;
      }
      Refuse(res, 409,
             absl::AlreadyExistsError(absl::StrCat(
                 "already signed in as ", u->name,
                 ": sign out first (the Sign out button) to sign in with another token")),
             false);
      return false;
    }
  }
  absl::StatusOr<std::string> id = auth_.Login(token);
  if (!id.ok()) {
    Refuse(res, 401, id.status(), false);
    return false;
  }
  res.set_header("Set-Cookie", DashboardAuth::CookieFor(*id, tls_));
  res.set_redirect(WithoutToken(req), 303);  // the token leaves the address bar and history
  return false;
}

void DashboardServer::ServePage(const httplib::Request& req, httplib::Response& res,
                                const char* file) {
  if (req.has_param("token") && !AddressBarLogin(req, res)) return;
  absl::StatusOr<User> user = auth_.Identify(CredentialsOf(req));
  if (!user.ok()) return Refuse(res, 401, user.status(), false);
  res.set_content(FindStaticFile(file)->content, ContentTypeOf(file));
}

void DashboardServer::AddLogin(httplib::Server& http) {
  const char* scheme = tls_ ? "https" : "http";
  // Both POSTs change who the browser is signed in as: same-origin only (login CSRF, forced
  // logout).
  auto same_origin = [scheme](const httplib::Request& req, httplib::Response& res) {
    absl::Status s = CheckSameOrigin(HeaderOf(req, "Origin"), HeaderOf(req, "Sec-Fetch-Site"),
                                     scheme, req.get_header_value("Host"));
    if (!s.ok()) Refuse(res, 403, s, false);
    return s.ok();
  };
  http.Get("/login", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(FindStaticFile("login.html")->content, ContentTypeOf("login.html"));
  });
  http.Post("/login", [this, same_origin](const httplib::Request& req, httplib::Response& res) {
    if (!same_origin(req, res)) return;
    absl::StatusOr<std::string> id = auth_.Login(req.get_param_value("token"));
    if (!id.ok()) return Refuse(res, 401, id.status(), false);
    // An explicit sign-in from a dashboard page replaces the browser's session.
    if (auto old = CredentialsOf(req).session) auth_.Logout(*old);
    res.set_header("Set-Cookie", DashboardAuth::CookieFor(*id, tls_));
    res.set_redirect("/", 303);
  });
  http.Post("/logout", [this, same_origin](const httplib::Request& req, httplib::Response& res) {
    if (!same_origin(req, res)) return;
    if (auto id = CredentialsOf(req).session) auth_.Logout(*id);
    res.set_header("Set-Cookie", DashboardAuth::ExpiredCookie(tls_));
    res.set_redirect("/login", 303);
  });
}

void DashboardServer::AddPages(httplib::Server& http) {
  for (const auto& [path, file] : {std::pair<const char*, const char*>{"/", "index.html"},
                                   {"/job", "job.html"},
                                   {"/workers", "workers.html"}}) {
    http.Get(path, [this, file = file](const httplib::Request& req, httplib::Response& res) {
      ServePage(req, res, file);
    });
  }
  http.Get(R"(/static/([A-Za-z0-9_.-]+))", [](const httplib::Request& req, httplib::Response& res) {
    const std::string name = req.matches[1].str();
    if (const StaticFile* f = FindStaticFile(name)) {
      res.set_content(f->content, ContentTypeOf(name));
    } else {
      res.status = 404;
      res.set_content("no such file\n", kText);
    }
  });
  http.Get("/chart.js", [this](const httplib::Request&, httplib::Response& res) {
    if (chart_js_.empty()) {
      res.status = 404;
      res.set_content("chart.js missing: install Debian's libjs-chart.js\n", kText);
      return;
    }
    res.set_content(chart_js_, "text/javascript; charset=utf-8");
  });
}

void DashboardServer::AddApi(httplib::Server& http) {
  // A handler that runs only for a known user; the others get 401.
  using UserHandler = std::function<void(const httplib::Request&, httplib::Response&, const User&)>;
  auto api = [this](UserHandler handler) {
    return
        [this, handler = std::move(handler)](const httplib::Request& req, httplib::Response& res) {
          absl::StatusOr<User> user = auth_.Identify(CredentialsOf(req));
          if (!user.ok()) return Refuse(res, 401, user.status(), true);
          handler(req, res, *user);
        };
  };
  const DashboardApi* a = &api_;
  http.Get("/api/whoami", api([a](const httplib::Request&, httplib::Response& res, const User& u) {
             res.set_content(a->WhoAmI(u), kJson);
           }));
  http.Get("/api/jobs",
           api([a](const httplib::Request& req, httplib::Response& res, const User& u) {
             const absl::StatusOr<int64_t> size = IntParam(req, "page_size", 0);
             if (!size.ok()) return Answer(res, size.status());
             Answer(res, a->Jobs(u, *size, req.get_param_value("page_token")));
           }));
  http.Get("/api/workers", api([a](const httplib::Request&, httplib::Response& res, const User& u) {
             res.set_content(a->Workers(u), kJson);
           }));
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
}

}  // namespace shardline::coordinator::dashboard
