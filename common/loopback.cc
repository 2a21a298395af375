#include "common/loopback.h"

#include <arpa/inet.h>

#include <algorithm>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/strip.h"

namespace shardline {

bool IsLoopbackAddress(absl::string_view address) {
  if (absl::StartsWith(address, "unix:")) return true;
  // gRPC target schemes ("dns:///host:port", "ipv4:host:port") name the same hosts.
  for (absl::string_view scheme : {"dns:///", "ipv4:", "ipv6:"}) {
    if (absl::ConsumePrefix(&address, scheme)) break;
  }
  absl::string_view host = address;
  if (absl::StartsWith(host, "[")) {
    const size_t close = host.find(']');
    host = host.substr(1, close == absl::string_view::npos ? host.size() - 1 : close - 1);
  } else if (host.find(':') == host.rfind(':')) {  // at most one colon: host[:port]
    if (const size_t colon = host.rfind(':'); colon != absl::string_view::npos) {
      host = host.substr(0, colon);
    }
  }
  if (host == "localhost") return true;
  // Numeric addresses only: a name such as "127.example.com" is not loopback.
  const std::string h(host);
  unsigned char v4[4];
  if (inet_pton(AF_INET, h.c_str(), v4) == 1) return v4[0] == 127;
  unsigned char v6[16];
  if (inet_pton(AF_INET6, h.c_str(), v6) == 1) {
    static constexpr unsigned char kLoopback[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    static constexpr unsigned char kMappedV4[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (std::equal(v6, v6 + 16, kLoopback)) return true;
    return std::equal(v6, v6 + 12, kMappedV4) && v6[12] == 127;  // ::ffff:127.x.y.z
  }
  return false;
}

}  // namespace shardline
