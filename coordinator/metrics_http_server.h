// MetricsHttpServer: the coordinator's Prometheus endpoint, GET /metrics (text format) from a
// render callback, on its own port (http_server.h: thread pool, request and write deadlines).
// Other paths get 404, other methods 405.
//
// Thread safety: Start/Stop from one owner; `render` runs on the pool's threads, concurrently
// with itself, and never after Stop() returned.
#ifndef SHARDLINE_COORDINATOR_METRICS_HTTP_SERVER_H_
#define SHARDLINE_COORDINATOR_METRICS_HTTP_SERVER_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "coordinator/http_server.h"

namespace shardline::coordinator {

// threads: --metrics_threads; request_timeout and write_timeout: --metrics_request_timeout_ms.
using MetricsHttpOptions = HttpServerOptions;

class MetricsHttpServer {
 public:
  // Binds `listen` ("host:port", IPv4 or a resolvable name; port 0 picks one).
  // Errors: INVALID_ARGUMENT for a malformed address or options, UNAVAILABLE when it cannot bind.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      const std::string& listen, std::function<std::string()> render,
      const MetricsHttpOptions& options = MetricsHttpOptions());

  const std::string& address() const { return http_->address(); }
  // Closes the port and every open connection, then joins the threads. Idempotent.
  void Stop() { http_->Stop(); }

 private:
  explicit MetricsHttpServer(std::unique_ptr<HttpServer> http) : http_(std::move(http)) {}

  std::unique_ptr<HttpServer> http_;
};

}  // namespace shardline::coordinator

#endif  // SHARDLINE_COORDINATOR_METRICS_HTTP_SERVER_H_
