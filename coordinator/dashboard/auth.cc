#include "coordinator/dashboard/auth.h"

#include <cctype>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace shardline::coordinator::dashboard {
namespace {

// Cookie values may not hold blanks, quotes, commas, semicolons or backslashes: tokens are
// percent-encoded outside [A-Za-z0-9._~-].
std::string PercentEncode(absl::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '.' || c == '_' || c == '~' || c == '-') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::optional<std::string> PercentDecode(absl::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out.push_back(s[i]);
      continue;
    }
    if (i + 2 >= s.size()) return std::nullopt;
    const int hi = HexValue(s[i + 1]), lo = HexValue(s[i + 2]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out.push_back(static_cast<char>(hi * 16 + lo));
    i += 2;
  }
  return out;
}

}  // namespace

absl::StatusOr<User> DashboardAuth::Identify(const PresentedTokens& tokens) const {
  const std::optional<std::string>* presented = nullptr;
  for (const auto* t : {&tokens.query, &tokens.bearer, &tokens.cookie}) {
    if (t->has_value()) {
      presented = t;
      break;
    }
  }
  if (presented != nullptr) {
    if (std::optional<User> u = users_->Find(**presented)) return *u;
  }
  if (users_->empty()) return User{"anonymous", true};  // user authentication is off
  if (presented == nullptr) {
    return absl::UnauthenticatedError(
        "no token: open this page once as ...?token=<your user token> (the coordinator's "
        "--users_file or --token), or send \"Authorization: Bearer <token>\"");
  }
  return absl::UnauthenticatedError("wrong token");
}

std::string DashboardAuth::CookieFor(absl::string_view token) {
  return absl::StrCat(kCookieName, "=", PercentEncode(token),
                      "; Path=/; HttpOnly; SameSite=Strict");
}

std::optional<std::string> DashboardAuth::TokenFromCookieHeader(absl::string_view header) {
  for (absl::string_view part : absl::StrSplit(header, ';')) {
    part = absl::StripAsciiWhitespace(part);
    if (absl::ConsumePrefix(&part, kCookieName) && absl::ConsumePrefix(&part, "=")) {
      return PercentDecode(part);
    }
  }
  return std::nullopt;
}

std::optional<std::string> DashboardAuth::TokenFromAuthorization(absl::string_view header) {
  if (!absl::ConsumePrefix(&header, "Bearer ")) return std::nullopt;
  return std::string(header);
}

}  // namespace shardline::coordinator::dashboard
