// MetricsHttpServer: the coordinator's Prometheus endpoint, GET /metrics (text format) from a
// render callback, on its own port (http_server.h: thread pool, request and write deadlines).
// Other paths get 404, other methods 405. Who may scrape is MetricsAuth's: a request that needs
// a token and has none, or a wrong one, gets 401.
//
// Thread safety: Start/Stop from one owner; `render` runs on the pool's threads, concurrently
// with itself, and never after Stop() returned.
#ifndef SHARDLINE_COORDINATOR_HTTP_METRICS_HTTP_SERVER_H_
#define SHARDLINE_COORDINATOR_HTTP_METRICS_HTTP_SERVER_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "coordinator/auth/user_table.h"
#include "coordinator/http/http_server.h"

namespace shardline::coordinator {

// threads: --metrics_threads; request_timeout and write_timeout: --metrics_request_timeout_ms.
using MetricsHttpOptions = HttpServerOptions;

// Who may GET /metrics (docs/security.md "Metrics endpoint"). Off loopback a scrape needs
// "Authorization: Bearer <token>" with a user's token (users) or the scrape token
// (--metrics_token_file), as the API needs a user token; on loopback it stays open (what a local
// Prometheus scrapes) unless a scrape token is set, which then is needed there too.
class MetricsAuth {
 public:
  // Open to everyone (tests, and what Create gives on loopback without a scrape token).
  MetricsAuth() = default;
  // `listen` is the endpoint's address; `users` may be null. Errors: FAILED_PRECONDITION off
  // loopback with neither users nor a scrape token, unless `insecure` (then it is open).
  static absl::StatusOr<MetricsAuth> Create(const std::string& listen,
                                            std::shared_ptr<const UserTable> users,
                                            std::string scrape_token, bool insecure);
  bool required() const { return required_; }
  // OK, or UNAUTHENTICATED naming what is missing, for a request's Authorization header value
  // (empty: none sent).
  absl::Status Check(absl::string_view authorization) const;

 private:
  bool required_ = false;
  std::shared_ptr<const UserTable> users_;
  std::string scrape_token_;
};

class MetricsHttpServer {
 public:
  // Binds `listen` ("host:port", IPv4 or a resolvable name; port 0 picks one).
  // Errors: INVALID_ARGUMENT for a malformed address or options, UNAVAILABLE when it cannot bind.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      const std::string& listen, std::function<std::string()> render,
      const MetricsHttpOptions& options = MetricsHttpOptions(), MetricsAuth auth = MetricsAuth());

  const std::string& address() const { return http_->address(); }
  // Closes the port and every open connection, then joins the threads. Idempotent.
  void Stop() { http_->Stop(); }

 private:
  explicit MetricsHttpServer(std::unique_ptr<HttpServer> http) : http_(std::move(http)) {}

  std::unique_ptr<HttpServer> http_;
};

}  // namespace shardline::coordinator

#endif  // SHARDLINE_COORDINATOR_HTTP_METRICS_HTTP_SERVER_H_
