#include "coordinator/dashboard/request_checks.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/loopback.h"

namespace shardline::coordinator::dashboard {
namespace {

// "host" and "port" of "host:port" ("[v6]:port" keeps its brackets); port empty when none.
std::pair<std::string, std::string> SplitHostPort(absl::string_view s) {
  const size_t colon = s.rfind(':');
  if (colon == absl::string_view::npos ||
      (s.find(']') != absl::string_view::npos && s.find(']') > colon)) {
    return {std::string(s), ""};
  }
  return {std::string(s.substr(0, colon)), std::string(s.substr(colon + 1))};
}

}  // namespace

absl::StatusOr<HostCheck> HostCheck::Create(absl::string_view bound,
                                            const std::vector<std::string>& names) {
  HostCheck c;
  const auto [host, port] = SplitHostPort(absl::AsciiStrToLower(bound));
  // A wildcard address is no name a browser can use: the operator names the host instead.
  if (host != "0.0.0.0" && host != "[::]" && !host.empty()) {
    c.exact_.push_back(absl::StrCat(host, ":", port));
  }
  if (IsLoopbackAddress(bound)) {
    for (const char* h : {"localhost", "127.0.0.1", "[::1]"}) {
      c.exact_.push_back(absl::StrCat(h, ":", port));
    }
  }
  for (const std::string& name : names) {
    const auto [n, p] = SplitHostPort(absl::AsciiStrToLower(name));
    int port_number = 0;
    if (n.empty() || n.find_first_of("/ @") != std::string::npos ||
        (!p.empty() && !absl::SimpleAtoi(p, &port_number))) {
      return absl::InvalidArgumentError(
          absl::StrCat("--dashboard_host: \"", name, "\" is not a host name or host:port"));
    }
    (p.empty() ? c.any_port_ : c.exact_).push_back(p.empty() ? n : absl::StrCat(n, ":", p));
  }
  return c;
}

absl::Status HostCheck::Check(const std::optional<std::string>& host) const {
  if (host.has_value()) {
    const std::string h = absl::AsciiStrToLower(*host);
    if (std::find(exact_.begin(), exact_.end(), h) != exact_.end()) return absl::OkStatus();
    const std::string name = SplitHostPort(h).first;
    if (std::find(any_port_.begin(), any_port_.end(), name) != any_port_.end()) {
      return absl::OkStatus();
    }
  }
  return absl::PermissionDeniedError(absl::StrCat(
      "Host \"", host.value_or(""),
      "\" is not this dashboard's address (a name another site points here, or a proxy's: "
      "name it with --dashboard_host)"));
}

absl::Status CheckSameOrigin(const std::optional<std::string>& origin,
                             const std::optional<std::string>& sec_fetch_site,
                             absl::string_view scheme, absl::string_view host) {
  if (origin.has_value()) {
    if (absl::AsciiStrToLower(*origin) ==
        absl::AsciiStrToLower(absl::StrCat(scheme, "://", host))) {
      return absl::OkStatus();
    }
    return absl::PermissionDeniedError(absl::StrCat("cross-origin request refused: Origin \"",
                                                    *origin, "\" is not this dashboard"));
  }
  if (sec_fetch_site == "same-origin") return absl::OkStatus();
  return absl::PermissionDeniedError(
      "cross-origin request refused: neither Origin nor Sec-Fetch-Site says it comes from a "
      "dashboard page");
}

absl::Status CheckAddressBarLogin(const std::optional<std::string>& sec_fetch_site) {
  if (sec_fetch_site == "none") return absl::OkStatus();
  return absl::PermissionDeniedError(
      absl::StrCat("a ?token= login is taken only from the address bar (this request came from ",
                   sec_fetch_site.has_value() ? absl::StrCat("a ", *sec_fetch_site, " page")
                                              : "a client that "
                                                "sends no Sec-Fetch-Site",
                   "): sign in with the form at /login"));
}

}  // namespace shardline::coordinator::dashboard
