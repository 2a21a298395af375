#include "common/network_interface.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace shardline {

absl::StatusOr<std::string> InterfaceForAddress(absl::string_view address) {
  absl::string_view bare = address;
  if (absl::ConsumePrefix(&bare, "[")) absl::ConsumeSuffix(&bare, "]");
  const std::string literal(bare);
  in_addr v4{};
  in6_addr v6{};
  int family = AF_UNSPEC;
  if (inet_pton(AF_INET, literal.c_str(), &v4) == 1) {
    family = AF_INET;
  } else if (inet_pton(AF_INET6, literal.c_str(), &v6) == 1) {
    family = AF_INET6;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("'", address, "' is not an IP address (host names are not resolved)"));
  }
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) {
    return absl::InternalError(absl::StrCat("getifaddrs: ", std::strerror(errno)));
  }
  std::string found;
  for (ifaddrs* i = list; i != nullptr && found.empty(); i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != family) continue;
    if (family == AF_INET) {
      const auto* sin = reinterpret_cast<const sockaddr_in*>(i->ifa_addr);
      if (sin->sin_addr.s_addr == v4.s_addr) found = i->ifa_name;
    } else {
      const auto* sin6 = reinterpret_cast<const sockaddr_in6*>(i->ifa_addr);
      if (std::memcmp(&sin6->sin6_addr, &v6, sizeof(v6)) == 0) found = i->ifa_name;
    }
  }
  freeifaddrs(list);
  if (found.empty()) {
    return absl::NotFoundError(absl::StrCat("no network interface holds ", address));
  }
  return found;
}

}  // namespace shardline
