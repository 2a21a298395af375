// Checks on a dashboard request before any user is looked at (docs/security.md "Dashboard"):
//
// HostCheck, against DNS rebinding: a page of another site whose name an attacker re-points at
// this address would otherwise be same-origin with "the dashboard" as far as the browser knows
// and could read it through the victim's network position. The Host header of such a request
// names the attacker's site, so only the dashboard's own names are served: its bound address,
// on loopback also localhost / 127.0.0.1 / [::1] with its port, and every --dashboard_host.
//
// CheckSameOrigin, against cross-site request forgery of the state-changing POSTs (/login,
// /logout): the browser's Origin header (or, without one, Sec-Fetch-Site) must say that the
// request comes from a dashboard page itself. Page scripts cannot set either header.
//
// CheckAddressBarLogin: a GET ...?token= login is taken only from the address bar (typed,
// pasted, a bookmark: Sec-Fetch-Site "none"), never from a link, form or redirect of another
// site (which could sign the victim in as the attacker: login CSRF).
//
// Thread safety: HostCheck is immutable after construction; the functions are pure.
#ifndef SHARDLINE_COORDINATOR_DASHBOARD_REQUEST_CHECKS_H_
#define SHARDLINE_COORDINATOR_DASHBOARD_REQUEST_CHECKS_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shardline::coordinator::dashboard {

class HostCheck {
 public:
  // `bound` is the listening "host:port"; `names` the --dashboard_host values ("name" matches
  // that name with any port, "name:port" only that port). Errors: INVALID_ARGUMENT for an empty
  // or malformed name.
  static absl::StatusOr<HostCheck> Create(absl::string_view bound,
                                          const std::vector<std::string>& names);

  // Errors: PERMISSION_DENIED naming the Host and the flag when `host` (the Host header;
  // nullopt when absent) is none of this dashboard's names.
  absl::Status Check(const std::optional<std::string>& host) const;

  // Whether any Host can pass (false for a wildcard listen address without --dashboard_host).
  bool empty() const { return exact_.empty() && any_port_.empty(); }

 private:
  std::vector<std::string> exact_;     // "host:port", lower case
  std::vector<std::string> any_port_;  // "host", lower case
};

// Errors: PERMISSION_DENIED when `origin` (the Origin header) is not "scheme://host" of this
// request, or, without an Origin, `sec_fetch_site` is not "same-origin".
absl::Status CheckSameOrigin(const std::optional<std::string>& origin,
                             const std::optional<std::string>& sec_fetch_site,
                             absl::string_view scheme, absl::string_view host);

// Errors: PERMISSION_DENIED unless `sec_fetch_site` is "none" (a navigation the user started).
absl::Status CheckAddressBarLogin(const std::optional<std::string>& sec_fetch_site);

}  // namespace shardline::coordinator::dashboard

#endif  // SHARDLINE_COORDINATOR_DASHBOARD_REQUEST_CHECKS_H_
