// HttpServer: one HTTP port of the coordinator (the Prometheus endpoint, the dashboard), served by
// cpp-httplib with routes the owner registers before it listens.
//
// Requests are served concurrently by a fixed pool of `threads`; a request must arrive whole
// within `request_timeout` and its response be taken by the client within `write_timeout`, so a
// slow client holds one pool thread for a bounded time. Stop() shuts down every open connection
// before joining, so it returns promptly whatever the clients do. Connections wait for a pool
// thread in accept order, at most `max_queued` of them (each costs a file descriptor until
// then); one accepted beyond `threads` + `max_queued` is answered 503 and closed at once. A
// connection serves one request (no keep-alive), so no client holds a thread between requests.
//
// With a certificate and key (tls_cert_pem/tls_key_pem) the port speaks TLS only (1.2 or
// newer): the handshake must also finish within `request_timeout`, and a client that speaks
// plain HTTP to it gets no answer. (httplib's SSLServer does its own blocking reads, so the
// deadlines above would not hold; this class drives OpenSSL over its own non-blocking reads.)
//
// Thread safety: Start/Stop from one owner; handlers run on the pool's threads, concurrently with
// themselves, and never after Stop() returned.
#ifndef SHARDLINE_COORDINATOR_HTTP_HTTP_SERVER_H_
#define SHARDLINE_COORDINATOR_HTTP_HTTP_SERVER_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace shardline::coordinator {

struct HttpServerOptions {
  int threads = 4;
  // Connections accepted while every thread is busy that wait for one; more are refused (503).
  int max_queued = 64;
  absl::Duration request_timeout = absl::Seconds(5);
  absl::Duration write_timeout = absl::Seconds(5);
  // PEM certificate (chain, leaf first) and private key: serve TLS. Both or neither.
  std::string tls_cert_pem;
  std::string tls_key_pem;
};

class HttpServer {
 public:
  // Registers the handlers (server.Get(...), set_error_handler...) before the port opens.
  using Routes = std::function<void(httplib::Server& server)>;
  // Called with the bound "host:port" before the first request is served; an error ends Start.
  using OnBound = std::function<absl::Status(absl::string_view address)>;

  // Binds `listen` ("host:port", IPv4 or a resolvable name; port 0 picks one). `what` names the
  // server in errors ("metrics"), `options_flags` the flags that set `options`.
  // Errors: INVALID_ARGUMENT for a malformed address or options, or a certificate or key that
  // does not load (or match); UNAVAILABLE when it cannot bind; `on_bound`'s.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(
      const std::string& listen, const Routes& routes, const HttpServerOptions& options,
      absl::string_view what, absl::string_view options_flags, const OnBound& on_bound = nullptr);
  ~HttpServer();  // Stops.

  const std::string& address() const { return address_; }
  // Closes the port and every open connection, then joins the threads. Idempotent.
  void Stop();

 private:
  class Impl;  // httplib::Server that tracks its connections (http_server.cc)
  HttpServer();

  std::unique_ptr<Impl> http_;
  std::string address_;
  std::thread thread_;  // httplib's accept loop
};

}  // namespace shardline::coordinator

#endif  // SHARDLINE_COORDINATOR_HTTP_HTTP_SERVER_H_
