#include "fsdp/tcp_kv_socket.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace shardline::fsdp::tcp_kv {

std::string Errno(absl::string_view what) { return absl::StrCat(what, ": ", strerror(errno)); }

absl::Status WaitFd(int fd, short events, absl::Time deadline, int wake_fd) {
  while (true) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return absl::DeadlineExceededError("socket timed out");
    pollfd fds[2] = {{fd, events, 0}, {wake_fd, POLLIN, 0}};
    // An infinite deadline waits forever (-1). It must not go through milliseconds + 1: that
    // overflowed to a negative number, clamped to a timeout of 0, and every idle server and
    // connection thread spun on poll() at 100% of a core.
    const int timeout_ms =
        left == absl::InfiniteDuration()
            ? -1
            : static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(left), 1 << 30) + 1);
    const int n = poll(fds, wake_fd >= 0 ? 2 : 1, timeout_ms);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::UnavailableError(Errno("poll"));
    if (wake_fd >= 0 && fds[1].revents != 0) return absl::CancelledError("shutting down");
    if (fds[0].revents != 0) return absl::OkStatus();
  }
}

absl::Status WriteAll(int fd, const std::string& data, absl::Time deadline, int wake_fd) {
  size_t done = 0;
  while (done < data.size()) {
    absl::Status ready = WaitFd(fd, POLLOUT, deadline, wake_fd);
    if (!ready.ok()) return ready;
    ssize_t n = send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n < 0) return absl::UnavailableError(Errno("send"));
    done += n;
  }
  return absl::OkStatus();
}

absl::Status ReadAll(int fd, char* out, size_t size, absl::Time deadline, int wake_fd) {
  size_t done = 0;
  while (done < size) {
    absl::Status ready = WaitFd(fd, POLLIN, deadline, wake_fd);
    if (!ready.ok()) return ready;
    ssize_t n = recv(fd, out + done, size - done, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n < 0) return absl::UnavailableError(Errno("recv"));
    if (n == 0) return absl::UnavailableError("connection closed by peer");
    done += n;
  }
  return absl::OkStatus();
}

void DiscardInputBriefly(int fd, int wake_fd) {
  shutdown(fd, SHUT_WR);
  const absl::Time deadline = absl::Now() + absl::Seconds(1);
  char buffer[16384];
  while (WaitFd(fd, POLLIN, deadline, wake_fd).ok()) {
    ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) return;
  }
}

void SetNonBlocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

std::string PeerName(const sockaddr_storage& addr) {
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (addr.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&addr);
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
    port = ntohs(a->sin_port);
  } else if (addr.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&addr);
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
    port = ntohs(a->sin6_port);
  }
  return absl::StrCat(host, ":", port);
}

absl::StatusOr<addrinfo*> Resolve(const std::string& host, int port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  addrinfo* result = nullptr;
  const std::string port_str = absl::StrCat(port);
  int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), port_str.c_str(), &hints, &result);
  if (rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("kv store: cannot resolve ", host, ": ", gai_strerror(rc)));
  }
  return result;
}

}  // namespace shardline::fsdp::tcp_kv
