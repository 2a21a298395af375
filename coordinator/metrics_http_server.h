// MetricsHttpServer: the coordinator's HTTP endpoint, GET /metrics (Prometheus text format) from
// a render callback, on its own port. Other paths get 404, other methods 405.
//
// Served by cpp-httplib (routing, request parsing), so later pages are one route each. Requests
// are served concurrently by a fixed pool of `threads`; a request must arrive whole within
// `request_timeout` and its response be taken by the client within `write_timeout`, so a slow
// client holds one pool thread for a bounded time. Stop() shuts down every open connection
// before joining, so it returns promptly whatever the clients do. Connections wait for a pool
// thread in accept order; each costs the coordinator a file descriptor until then.
//
// Thread safety: Start/Stop from one owner; `render` runs on the pool's threads, concurrently
// with itself, and never after Stop() returned.
#ifndef SHARDLINE_COORDINATOR_METRICS_HTTP_SERVER_H_
#define SHARDLINE_COORDINATOR_METRICS_HTTP_SERVER_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace shardline::coordinator {

struct MetricsHttpOptions {
  int threads = 4;                                    // --metrics_threads
  absl::Duration request_timeout = absl::Seconds(5);  // --metrics_request_timeout_ms
  absl::Duration write_timeout = absl::Seconds(5);    // --metrics_request_timeout_ms
};

class MetricsHttpServer {
 public:
  // Binds `listen` ("host:port", IPv4 or a resolvable name; port 0 picks one).
  // Errors: INVALID_ARGUMENT for a malformed address or options, UNAVAILABLE when it cannot bind.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      const std::string& listen, std::function<std::string()> render,
      const MetricsHttpOptions& options = MetricsHttpOptions());
  ~MetricsHttpServer();  // Stops.

  const std::string& address() const { return address_; }
  // Closes the port and every open connection, then joins the threads. Idempotent.
  void Stop();

 private:
  class HttpServer;  // httplib::Server that tracks its connections (metrics_http_server.cc)
  MetricsHttpServer();

  std::unique_ptr<HttpServer> http_;
  std::string address_;
  std::thread thread_;  // httplib's accept loop
};

}  // namespace shardline::coordinator

#endif  // SHARDLINE_COORDINATOR_METRICS_HTTP_SERVER_H_
