// InterfaceForAddress: the name of the local network interface that holds an IP address. The
// worker daemon and the trainer use it to point NCCL's socket transport (NCCL_SOCKET_IFNAME) at
// the interface the node was configured to communicate on (--address), instead of letting NCCL
// pick its own.
//
// Thread safety: a pure function of the host's interface table (getifaddrs).
#ifndef SHARDLINE_COMMON_NETWORK_INTERFACE_H_
#define SHARDLINE_COMMON_NETWORK_INTERFACE_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shardline {

// "10.0.0.5" -> "eth0". `address` is an IPv4 or IPv6 literal (IPv6 with or without brackets).
// Errors: INVALID_ARGUMENT when it is not an IP literal (host names are not resolved: NCCL needs
// the interface the node was told to use, not a guess); NOT_FOUND when no interface holds it
// (the wildcard 0.0.0.0 included); INTERNAL when getifaddrs fails.
absl::StatusOr<std::string> InterfaceForAddress(absl::string_view address);

}  // namespace shardline

#endif  // SHARDLINE_COMMON_NETWORK_INTERFACE_H_
