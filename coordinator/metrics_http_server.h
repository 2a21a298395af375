// MetricsHttpServer: a minimal HTTP/1.0 endpoint serving GET /metrics (Prometheus text format)
// from a render callback, on its own port and thread. Other paths get 404, other methods 405.
// One connection at a time, each with a short read timeout: scrapes are rare and small.
//
// Thread safety: Start/Stop from one owner; `render` runs on the server's thread.
#ifndef SHARDLINE_COORDINATOR_METRICS_HTTP_SERVER_H_
#define SHARDLINE_COORDINATOR_METRICS_HTTP_SERVER_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace shardline::coordinator {

class MetricsHttpServer {
 public:
  // Binds `listen` ("host:port", IPv4 or a resolvable name; port 0 picks one).
  // Errors: INVALID_ARGUMENT for a malformed address, UNAVAILABLE when it cannot bind.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      const std::string& listen, std::function<std::string()> render);
  ~MetricsHttpServer();  // Stops.

  const std::string& address() const { return address_; }
  void Stop();

 private:
  MetricsHttpServer() = default;
  void Serve();
  void Handle(int fd);

  int listen_fd_ = -1;
  int wake_fd_ = -1;  // eventfd that ends Serve()
  std::string address_;
  std::function<std::string()> render_;
  std::thread thread_;
};

}  // namespace shardline::coordinator

#endif  // SHARDLINE_COORDINATOR_METRICS_HTTP_SERVER_H_
