#include "coordinator/metrics_http_server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace shardline::coordinator {
namespace {

void WriteAll(int fd, const std::string& data) {
  size_t off = 0;
  while (off < data.size()) {
    const ssize_t n = send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      return;
    }
    off += n;
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const std::string& listen, std::function<std::string()> render) {
  const size_t colon = listen.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(listen.substr(colon + 1), &port) ||
      port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics address must be host:port, got \"", listen, "\""));
  }
  const std::string host = listen.substr(0, colon);
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.empty() ? nullptr : host.c_str(), nullptr, &hints, &res) != 0 ||
      res == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("cannot resolve metrics host ", host));
  }
  sockaddr_in addr = *reinterpret_cast<sockaddr_in*>(res->ai_addr);
  freeaddrinfo(res);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  std::unique_ptr<MetricsHttpServer> s(new MetricsHttpServer());
  s->listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  setsockopt(s->listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(s->listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(s->listen_fd_, 16) != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", listen, ": ", std::strerror(errno)));
  }
  socklen_t len = sizeof(addr);
  getsockname(s->listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  s->address_ = absl::StrCat(host, ":", ntohs(addr.sin_port));
  s->wake_fd_ = eventfd(0, EFD_CLOEXEC);
  s->render_ = std::move(render);
  MetricsHttpServer* self = s.get();
  s->thread_ = std::thread([self] { self->Serve(); });
  return s;
}

MetricsHttpServer::~MetricsHttpServer() { Stop(); }

void MetricsHttpServer::Stop() {
  if (thread_.joinable()) {
    const uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof(one));
    thread_.join();
  }
  if (listen_fd_ >= 0) close(listen_fd_);
  if (wake_fd_ >= 0) close(wake_fd_);
  listen_fd_ = wake_fd_ = -1;
}

void MetricsHttpServer::Serve() {
  while (true) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents) return;
    if (!(fds[0].revents & POLLIN)) continue;
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    Handle(fd);
    close(fd);
  }
}

void MetricsHttpServer::Handle(int fd) {
  std::string req;
  char buf[1024];
  // The request line and headers end with an empty line; give up after 1 s or 8 KiB.
  while (req.find("\r\n\r\n") == std::string::npos && req.find("\n\n") == std::string::npos &&
         req.size() < 8192) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 1000) <= 0) break;
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    req.append(buf, n);
  }
  std::string status = "200 OK";
  std::string body;
  std::string type = "text/plain; version=0.0.4; charset=utf-8";
  if (!absl::StartsWith(req, "GET ")) {
    status = "405 Method Not Allowed";
    body = "only GET /metrics\n";
    type = "text/plain";
  } else if (!absl::StartsWith(req, "GET /metrics ") && !absl::StartsWith(req, "GET /metrics?")) {
    status = "404 Not Found";
    body = "see /metrics\n";
    type = "text/plain";
  } else {
    body = render_();
  }
  WriteAll(fd, absl::StrCat("HTTP/1.0 ", status, "\r\nContent-Type: ", type, "\r\nContent-Length: ",
                            body.size(), "\r\nConnection: close\r\n\r\n", body));
}

}  // namespace shardline::coordinator
