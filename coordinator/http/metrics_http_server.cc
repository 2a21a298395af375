#include "coordinator/http/metrics_http_server.h"

#include <httplib.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/constant_time.h"
#include "common/loopback.h"

namespace shardline::coordinator {

absl::StatusOr<MetricsAuth> MetricsAuth::Create(const std::string& listen,
                                                std::shared_ptr<const UserTable> users,
                                                std::string scrape_token, bool insecure) {
  MetricsAuth auth;
  const bool have_users = users != nullptr && !users->empty();
  const bool loopback = IsLoopbackAddress(listen);
  if (!loopback && !have_users && scrape_token.empty() && !insecure) {
    return absl::FailedPreconditionError(
        absl::StrCat("refusing to serve metrics on non-loopback address ", listen,
                     " without a token to check: set --metrics_token_file (or users: --users_file, "
                     "--token_file), or --insecure to let anyone who can reach it read them"));
  }
  auth.required_ = !scrape_token.empty() || (!loopback && have_users);
  auth.users_ = std::move(users);
  auth.scrape_token_ = std::move(scrape_token);
  return auth;
}

absl::Status MetricsAuth::Check(absl::string_view authorization) const {
  if (!required_) return absl::OkStatus();
  absl::string_view token = authorization;
  if (authorization.empty() || !absl::ConsumePrefix(&token, "Bearer ")) {
    return absl::UnauthenticatedError(
        "metrics need \"Authorization: Bearer <token>\": the scrape token "
        "(--metrics_token_file) or a user token");
  }
  if (!scrape_token_.empty() && ConstantTimeEquals(token, scrape_token_)) return absl::OkStatus();
  if (users_ != nullptr && users_->Find(std::string(token)).has_value()) return absl::OkStatus();
  return absl::UnauthenticatedError("wrong token: neither the scrape token nor a user's");
}

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const std::string& listen, std::function<std::string()> render,
    const MetricsHttpOptions& options, MetricsAuth auth) {
  auto routes = [&render, &auth](httplib::Server& http) {
    http.Get("/metrics", [render = std::move(render), auth = std::move(auth)](
                             const httplib::Request& req, httplib::Response& res) {
      if (absl::Status s = auth.Check(req.get_header_value("Authorization")); !s.ok()) {
        res.status = 401;
        res.set_header("WWW-Authenticate", "Bearer realm=\"shardline metrics\"");
        res.set_content(absl::StrCat(s.message(), "\n"), "text/plain");
        return;
      }
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
