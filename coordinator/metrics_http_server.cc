#include "coordinator/metrics_http_server.h"

#include <httplib.h>

#include <utility>

namespace shardline::coordinator {

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const std::string& listen, std::function<std::string()> render,
    const MetricsHttpOptions& options) {
  auto routes = [&render](httplib::Server& http) {
    http.Get("/metrics",
             [render = std::move(render)](const httplib::Request&, httplib::Response& res) {
               res.set_content(render(), "text/plain; version=0.0.4; charset=utf-8");
             });
    const httplib::Server::Handler not_allowed = [](const httplib::Request&,
                                                    httplib::Response& res) {
      res.status = 405;
      res.set_content("only GET /metrics\n", "text/plain");
    };
    http.Post(".*", not_allowed);
    http.Put(".*", not_allowed);
    http.Patch(".*", not_allowed);
    http.Delete(".*", not_allowed);
    http.Options(".*", not_allowed);
    http.set_error_handler([](const httplib::Request&, httplib::Response& res) {
      if (res.status == 404) res.set_content("see /metrics\n", "text/plain");
    });
  };
  auto http = HttpServer::Start(listen, routes, options, "metrics",
                                "--metrics_threads and --metrics_request_timeout_ms");
  if (!http.ok()) return http.status();
  return std::unique_ptr<MetricsHttpServer>(new MetricsHttpServer(std::move(*http)));
}

}  // namespace shardline::coordinator
