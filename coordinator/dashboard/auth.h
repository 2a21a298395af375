// DashboardAuth: who a dashboard request comes from, by the same users as the gRPC API
// (user_table.h: --users_file and/or --token), and the browser sessions (session_store.h).
//
// A request identifies its user by an "Authorization: Bearer <token>" header (scripts, curl) or
// by the session cookie (kCookieName) a login set. The cookie carries only a random session id,
// never the user's token: a login (the /login form, or ?token= typed into the address bar;
// dashboard_server.h) exchanges the token for a session, and logout ends it. With no users
// configured, user authentication is off as it is for the API: everyone is "anonymous", an
// admin. Worker join tokens and attempt credentials are not user tokens and are refused like
// any wrong token.
//
// Thread safety: every method may be called from any thread (the table and the store lock).
#ifndef SHARDLINE_COORDINATOR_DASHBOARD_AUTH_H_
#define SHARDLINE_COORDINATOR_DASHBOARD_AUTH_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/clock.h"
#include "coordinator/auth/user_table.h"
#include "coordinator/dashboard/session_store.h"

namespace shardline::coordinator::dashboard {

// What one request presents; nullopt where it has none.
struct Credentials {
  std::optional<std::string> bearer;   // Authorization: Bearer
  std::optional<std::string> session;  // the kCookieName cookie
};

class DashboardAuth {
 public:
  // The old name ("shardline_token", which held the token itself) is not read any more.
  static constexpr char kCookieName[] = "shardline_session";

  // `clock` must outlive this; nullptr: the wall clock.
  DashboardAuth(std::shared_ptr<const UserTable> users, const SessionOptions& sessions,
                const Clock* clock = nullptr)
      : users_(std::move(users)), sessions_(sessions, clock) {}

  // True when no users are configured: everyone is "anonymous", an admin.
  bool open() const { return users_->empty(); }

  // The user of the bearer token if one is presented, else of the session. Errors:
  // UNAUTHENTICATED "wrong token" for a token that is nobody's, UNAUTHENTICATED "no such
  // session ..." for a cookie naming no live session, UNAUTHENTICATED naming how to sign in
  // when users exist and nothing was presented.
  absl::StatusOr<User> Identify(const Credentials& credentials);
  // The user of `token`; nullopt when it is nobody's.
  std::optional<User> UserOf(absl::string_view token) const { return users_->Find(token); }
  // The user of the live session `id`; nullopt when none (or its token left the user table).
  std::optional<User> SessionUser(absl::string_view id);

  // Opens a session for `token`; returns its id. Errors: UNAUTHENTICATED "wrong token".
  absl::StatusOr<std::string> Login(absl::string_view token);
  // Ends session `id` (nothing when there is none).
  void Logout(absl::string_view id) { sessions_.Delete(id); }
  size_t sessions() const { return sessions_.size(); }

  // The Set-Cookie value that keeps session `id` in the browser: HttpOnly (page scripts cannot
  // read it), SameSite=Strict (other sites' pages cannot send it), Path=/, Secure over TLS. No
  // Max-Age: the browser forgets it when it closes; the server ends it earlier (SessionOptions).
  static std::string CookieFor(absl::string_view id, bool secure);
  // The Set-Cookie value that makes the browser drop the cookie (logout).
  static std::string ExpiredCookie(bool secure);
  // The session id in a Cookie request header; nullopt when it names none.
  static std::optional<std::string> SessionFromCookieHeader(absl::string_view header);
  // The token of an Authorization header value ("Bearer <token>"); nullopt for another scheme.
  static std::optional<std::string> TokenFromAuthorization(absl::string_view header);

 private:
  std::shared_ptr<const UserTable> users_;
  SessionStore sessions_;
};

}  // namespace shardline::coordinator::dashboard

#endif  // SHARDLINE_COORDINATOR_DASHBOARD_AUTH_H_
