// IsLoopbackAddress: whether a "host:port" names this machine's loopback interface. The
// coordinator uses it to decide whether it may listen without tokens, and every client to
// decide whether it may send a token without TLS: one definition for both sides.
//
// Thread safety: a pure function.
#ifndef SHARDLINE_COMMON_LOOPBACK_H_
#define SHARDLINE_COMMON_LOOPBACK_H_

#include "absl/strings/string_view.h"

namespace shardline {

// True for 127.0.0.0/8, ::1 (bracketed or not), "localhost" and unix: sockets, with or
// without a port; false for anything else, including the wildcard addresses 0.0.0.0 and [::]
// (they listen on every interface) and host names other than localhost (not resolved).
bool IsLoopbackAddress(absl::string_view address);

}  // namespace shardline

#endif  // SHARDLINE_COMMON_LOOPBACK_H_
