// Socket plumbing of the TCP kv store (tcp_kv_server.h, tcp_kv_store.h): name resolution and
// reads and writes on non-blocking sockets that end at a deadline or when a wake-up descriptor
// becomes readable (the server's shutdown pipe), so no thread blocks past either.
//
// Thread safety: free functions on the caller's descriptors; no shared state.
#ifndef SHARDLINE_FSDP_TCP_KV_SOCKET_H_
#define SHARDLINE_FSDP_TCP_KV_SOCKET_H_

#include <netdb.h>
#include <sys/socket.h>

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace shardline::fsdp::tcp_kv {

// "<what>: <strerror(errno)>".
std::string Errno(absl::string_view what);

// Waits until `fd` is ready for `events` (POLLIN, POLLOUT) or `deadline` passes or `wake_fd`
// becomes readable (-1: no wake-up descriptor). Returns OK when ready; DEADLINE_EXCEEDED,
// CANCELLED (woken) or UNAVAILABLE (poll failed) otherwise.
absl::Status WaitFd(int fd, short events, absl::Time deadline, int wake_fd);

// Sends all of `data`. Errors: WaitFd's; UNAVAILABLE when send fails.
absl::Status WriteAll(int fd, const std::string& data, absl::Time deadline, int wake_fd);

// Reads exactly `size` bytes into `out`. Errors: WaitFd's; UNAVAILABLE when recv fails or the
// peer closed the connection.
absl::Status ReadAll(int fd, char* out, size_t size, absl::Time deadline, int wake_fd);

// Stops sending on `fd`, then reads and drops what the peer still sends until it closes, for up
// to 1 s. Closing a socket with unread input resets the connection, and the reset can destroy an
// error reply before a client still sending its request reads it.
void DiscardInputBriefly(int fd, int wake_fd);

void SetNonBlocking(int fd);

// "host:port" of a peer's address (IPv4 or IPv6; "?:0" for another family).
std::string PeerName(const sockaddr_storage& addr);

// The addresses to try for host:port (`passive`: to bind). The caller frees the list with
// freeaddrinfo. Errors: UNAVAILABLE naming the host when it does not resolve.
absl::StatusOr<addrinfo*> Resolve(const std::string& host, int port, bool passive);

}  // namespace shardline::fsdp::tcp_kv

#endif  // SHARDLINE_FSDP_TCP_KV_SOCKET_H_
