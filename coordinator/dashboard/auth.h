// DashboardAuth: who a dashboard request comes from, by the same users as the gRPC API
// (user_table.h: --users_file and/or --token).
//
// A request carries a user token in one of three places: `?token=...` (a browser's first visit:
// the server answers with a cookie and a redirect to the same page without the token, so the
// token leaves the address bar and the history), the cookie that answer set (HttpOnly, so page
// scripts cannot read it; SameSite=Strict, so other sites' pages cannot send it), or an
// "Authorization: Bearer <token>" header (scripts, curl). With no users configured, user
// authentication is off as it is for the API: everyone is "anonymous", an admin. Worker join
// tokens and attempt credentials are not user tokens and are refused like any wrong token.
//
// Thread safety: every method may be called from any thread (the table has its own lock).
#ifndef SHARDLINE_COORDINATOR_DASHBOARD_AUTH_H_
#define SHARDLINE_COORDINATOR_DASHBOARD_AUTH_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "coordinator/user_table.h"

namespace shardline::coordinator::dashboard {

// The tokens one request presents; nullopt where it has none.
struct PresentedTokens {
  std::optional<std::string> query;   // ?token=
  std::optional<std::string> cookie;  // kCookieName
  std::optional<std::string> bearer;  // Authorization: Bearer
};

class DashboardAuth {
 public:
  static constexpr char kCookieName[] = "shardline_token";

  explicit DashboardAuth(std::shared_ptr<const UserTable> users) : users_(std::move(users)) {}

  // The user of the first token presented (query, then bearer, then cookie). Errors:
  // UNAUTHENTICATED "wrong token" when that token is nobody's, and UNAUTHENTICATED naming how to
  // log in when users exist and no token was presented.
  absl::StatusOr<User> Identify(const PresentedTokens& tokens) const;

  // The Set-Cookie value that keeps `token` in the browser for this coordinator's pages.
  static std::string CookieFor(absl::string_view token);
  // The token in a Cookie request header; nullopt when it names none.
  static std::optional<std::string> TokenFromCookieHeader(absl::string_view header);
  // The token of an Authorization header value ("Bearer <token>"); nullopt for another scheme.
  static std::optional<std::string> TokenFromAuthorization(absl::string_view header);

 private:
  std::shared_ptr<const UserTable> users_;
};

}  // namespace shardline::coordinator::dashboard

#endif  // SHARDLINE_COORDINATOR_DASHBOARD_AUTH_H_
