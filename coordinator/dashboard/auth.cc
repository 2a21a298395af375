#include "coordinator/dashboard/auth.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace shardline::coordinator::dashboard {

absl::StatusOr<User> DashboardAuth::Identify(const Credentials& credentials) {
  if (credentials.bearer.has_value()) {
    if (std::optional<User> u = users_->Find(*credentials.bearer)) return *u;
    if (open()) return User{"anonymous", true};
    return absl::UnauthenticatedError("wrong token");
  }
  if (credentials.session.has_value()) {
    if (std::optional<User> u = SessionUser(*credentials.session)) return *u;
    if (open()) return User{"anonymous", true};
    return absl::UnauthenticatedError(
        "no such session (expired, signed out, or not a session id): sign in again at /login");
  }
  if (open()) return User{"anonymous", true};  // user authentication is off
  return absl::UnauthenticatedError(
      "not signed in: sign in at /login with your user token (the coordinator's --users_file "
      "or --token), or send \"Authorization: Bearer <token>\"");
}

std::optional<User> DashboardAuth::SessionUser(absl::string_view id) {
  std::optional<std::string> token = sessions_.Lookup(id);
  if (!token.has_value()) return std::nullopt;
  std::optional<User> u = users_->Find(*token);
  if (!u.has_value()) sessions_.Delete(id);  // the token left --users_file: so does the session
  return u;
}

absl::StatusOr<std::string> DashboardAuth::Login(absl::string_view token) {
  if (!users_->Find(token).has_value()) return absl::UnauthenticatedError("wrong token");
  return sessions_.Create(std::string(token));
}

std::string DashboardAuth::CookieFor(absl::string_view id, bool secure) {
  return absl::StrCat(kCookieName, "=", id, "; Path=/; HttpOnly; SameSite=Strict",
                      secure ? "; Secure" : "");
}

std::string DashboardAuth::ExpiredCookie(bool secure) {
  return absl::StrCat(kCookieName, "=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict",
                      secure ? "; Secure" : "");
}

std::optional<std::string> DashboardAuth::SessionFromCookieHeader(absl::string_view header) {
  for (absl::string_view part : absl::StrSplit(header, ';')) {
    part = absl::StripAsciiWhitespace(part);
    if (absl::ConsumePrefix(&part, kCookieName) && absl::ConsumePrefix(&part, "=")) {
      return std::string(part);
    }
  }
  return std::nullopt;
}

std::optional<std::string> DashboardAuth::TokenFromAuthorization(absl::string_view header) {
  if (!absl::ConsumePrefix(&header, "Bearer ")) return std::nullopt;
  return std::string(header);
}

}  // namespace shardline::coordinator::dashboard
