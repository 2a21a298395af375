// DashboardServer: the coordinator's web dashboard on its own port (--dashboard_listen), served
// by HttpServer (cpp-httplib, a fixed thread pool, request and write deadlines).
//
//   GET /                        job list        (static/index.html)
//   GET /job?id=JOB              one job         (static/job.html)
//   GET /workers                 the workers     (static/workers.html)
//   GET /static/NAME             the pages' script and style (embedded: static_files.h)
//   GET /chart.js                Debian's chart.js (read once at Start from chart_js_path)
//   GET /api/whoami | /api/jobs | /api/jobs/JOB | /api/jobs/JOB/metrics |
//       /api/jobs/JOB/logs?after_seq=N&tail=K | /api/jobs/JOB/checkpoints |
//       /api/jobs/JOB/checkpoints/STEP | /api/workers          JSON (json_api.h)
//
// Pages and /api need a user (auth.h): a page opened with ?token= sets the cookie and redirects
// to itself without the token; a request without a user gets 401 (a page: text saying how to
// log in; /api: {"error": ...}). Errors map to HTTP codes: NOT_FOUND 404, PERMISSION_DENIED 403,
// INVALID_ARGUMENT 400, UNAUTHENTICATED 401, others 503. Every answer forbids scripts from
// elsewhere (Content-Security-Policy script-src 'self'), sniffing and referrers; other methods
// get 405.
//
// Thread safety: Start/Stop from one owner; the handlers call the core from the pool's threads.
#ifndef SHARDLINE_COORDINATOR_DASHBOARD_DASHBOARD_SERVER_H_
#define SHARDLINE_COORDINATOR_DASHBOARD_DASHBOARD_SERVER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "coordinator/coordinator_core.h"
#include "coordinator/dashboard/auth.h"
#include "coordinator/dashboard/json_api.h"
#include "coordinator/http_server.h"
#include "coordinator/user_table.h"

namespace shardline::coordinator::dashboard {

struct DashboardOptions {
  HttpServerOptions http;  // --dashboard_threads, --metrics_request_timeout_ms
  // Chart.js 3 as a single UMD file (Debian's libjs-chart.js). Unreadable: the pages show their
  // tables and say the charts are missing.
  std::string chart_js_path = "/usr/share/javascript/chart.js/chart.min.js";
};

class DashboardServer {
 public:
  // Binds `listen` (host:port; port 0 picks one). `core` and `users` must outlive the server.
  // Errors: HttpServer::Start's.
  static absl::StatusOr<std::unique_ptr<DashboardServer>> Start(
      const std::string& listen, CoordinatorCore* core, std::shared_ptr<const UserTable> users,
      const DashboardOptions& options = DashboardOptions());

  const std::string& address() const { return http_->address(); }
  // Closes the port and every open connection. Idempotent.
  void Stop() { http_->Stop(); }

 private:
  DashboardServer(CoordinatorCore* core, std::shared_ptr<const UserTable> users)
      : api_(core), auth_(std::move(users)) {}

  const DashboardApi api_;
  const DashboardAuth auth_;
  std::string chart_js_;  // empty: not found
  std::unique_ptr<HttpServer> http_;
};

}  // namespace shardline::coordinator::dashboard

#endif  // SHARDLINE_COORDINATOR_DASHBOARD_DASHBOARD_SERVER_H_
