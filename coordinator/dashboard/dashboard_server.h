// DashboardServer: the coordinator's web dashboard on its own port (--dashboard_listen), served
// by HttpServer (cpp-httplib, a fixed thread pool, request and write deadlines).
//
//   GET /login                   the sign-in form (static/login.html)
//   POST /login                  token=T (form): opens a session, sets its cookie, 303 to /
//   POST /logout                 ends the session, drops the cookie, 303 to /login
//   GET /                        job list        (static/index.html)
//   GET /job?id=JOB              one job         (static/job.html)
//   GET /workers                 the workers     (static/workers.html)
//   GET /static/NAME             the pages' script and style (embedded: static_files.h)
//   GET /chart.js                Debian's chart.js (read once at Start from chart_js_path)
//   GET /api/whoami | /api/jobs | /api/jobs/JOB | /api/jobs/JOB/metrics |
//       /api/jobs/JOB/logs?after_seq=N&tail=K | /api/jobs/JOB/checkpoints |
//       /api/jobs/JOB/checkpoints/STEP | /api/workers          JSON (json_api.h)
//
// Every request first passes HostCheck (request_checks.h; else 421 with a text body). Pages and
// /api need a user (auth.h): the bearer token or the session cookie. A login is the /login
// form (POST, same-origin: CheckSameOrigin) or a page opened with ?token= typed into the
// address bar (CheckAddressBarLogin; refused, 409, when the browser has a live session of
// another user: sign out first); it sets the session cookie and redirects to the page without
// the token. A request without a user gets 401 (a page: text saying how to sign in; /api:
// {"error": ...}). Errors map to HTTP codes: NOT_FOUND 404, PERMISSION_DENIED 403,
// INVALID_ARGUMENT 400, UNAUTHENTICATED 401, others 503. Every answer forbids scripts from
// elsewhere (Content-Security-Policy script-src 'self'), framing, sniffing and referrers; other
// methods get 405. With a certificate the port serves TLS only (HttpServer) and the cookie is
// Secure.
//
// Thread safety: Start/Stop from one owner; the handlers call the core from the pool's threads.
#ifndef SHARDLINE_COORDINATOR_DASHBOARD_DASHBOARD_SERVER_H_
#define SHARDLINE_COORDINATOR_DASHBOARD_DASHBOARD_SERVER_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/auth/user_table.h"
#include "coordinator/core/coordinator_core.h"
#include "coordinator/dashboard/auth.h"
#include "coordinator/dashboard/json_api.h"
#include "coordinator/dashboard/request_checks.h"
#include "coordinator/http/http_server.h"

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace shardline::coordinator::dashboard {

struct DashboardOptions {
  HttpServerOptions http;  // --dashboard_threads, --metrics_request_timeout_ms
  // Chart.js 3 as a single UMD file (Debian's libjs-chart.js). Unreadable: the pages show their
  // tables and say the charts are missing.
  std::string chart_js_path = "/usr/share/javascript/chart.js/chart.min.js";
  SessionOptions sessions;
  // --dashboard_host: the names (or name:port) a browser reaches the dashboard by besides its
  // listen address (a DNS name, a reverse proxy's); other Host headers are refused.
  std::vector<std::string> hosts;
  // The coordinator's --tls_cert / --tls_key (PEM): when set the dashboard serves HTTPS only.
  std::string tls_cert_pem;
  std::string tls_key_pem;
};

class DashboardServer {
 public:
  // Binds `listen` (host:port; port 0 picks one). `core` and `users` must outlive the server.
  // Errors: INVALID_ARGUMENT for bad session options or --dashboard_host, HttpServer::Start's.
  static absl::StatusOr<std::unique_ptr<DashboardServer>> Start(
      const std::string& listen, CoordinatorCore* core, std::shared_ptr<const UserTable> users,
      const DashboardOptions& options = DashboardOptions());

  const std::string& address() const { return http_->address(); }
  // Closes the port and every open connection. Idempotent.
  void Stop() { http_->Stop(); }

 private:
  DashboardServer(CoordinatorCore* core, std::shared_ptr<const UserTable> users,
                  const DashboardOptions& options)
      : api_(core),
        auth_(std::move(users), options.sessions),
        tls_(!options.tls_cert_pem.empty()) {}

  // The routes, by kind (dashboard_server.cc).
  void AddLogin(httplib::Server& http);
  void AddPages(httplib::Server& http);
  void AddApi(httplib::Server& http);
  // A page handler: identifies the user (a ?token= login first) and serves `file`.
  void ServePage(const httplib::Request& req, httplib::Response& res, const char* file);
  // The ?token= login of a page request; false when it answered the request itself.
  bool AddressBarLogin(const httplib::Request& req, httplib::Response& res);

  const DashboardApi api_;
  DashboardAuth auth_;
  const bool tls_;
  std::optional<HostCheck> hosts_;
  std::string chart_js_;  // empty: not found
  std::unique_ptr<HttpServer> http_;
};

}  // namespace shardline::coordinator::dashboard

#endif  // SHARDLINE_COORDINATOR_DASHBOARD_DASHBOARD_SERVER_H_
