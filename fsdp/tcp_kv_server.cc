#include "fsdp/tcp_kv_server.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/constant_time.h"
#include "common/logging.h"
#include "fsdp/tcp_kv_socket.h"
#include "fsdp/tcp_kv_wire.h"

namespace shardline::fsdp {
namespace {

using tcp_kv::DiscardInputBriefly;
using tcp_kv::EncodeFrame;
using tcp_kv::Errno;
using tcp_kv::ErrorReply;
using tcp_kv::kMaxHelloField;
using tcp_kv::PeerName;
using tcp_kv::ReadFrame;
using tcp_kv::Resolve;
using tcp_kv::SetNonBlocking;
using tcp_kv::WriteAll;

// How long the accept loop waits after accept4 ran out of descriptors before it tries again.
constexpr absl::Duration kAcceptBackoff = absl::Milliseconds(100);

}  // namespace

absl::StatusOr<std::unique_ptr<TcpKvServer>> TcpKvServer::Create(const Options& options) {
  if (options.max_connections < 1 || options.max_keys < 1 || options.max_key_bytes < 1 ||
      options.max_value_bytes < 1 || options.max_total_bytes < 1 || options.max_request_bytes < 1 ||
      options.max_reply_bytes < 1) {
    return absl::InvalidArgumentError("kv server: every cap must be at least 1");
  }
  absl::StatusOr<addrinfo*> addrs = Resolve(options.host, options.port, /*passive=*/true);
  if (!addrs.ok()) return addrs.status();
  int fd = -1;
  std::string last_error = "no address";
  for (addrinfo* a = *addrs; a != nullptr; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      last_error = Errno("socket");
      continue;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 128) == 0) break;
    last_error = Errno("bind/listen");
    close(fd);
    fd = -1;
  }
  freeaddrinfo(*addrs);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat("kv server: cannot listen on ", options.host, ":",
                                               options.port, ": ", last_error));
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  const int port = bound.ss_family == AF_INET6
                       ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                       : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  int wake[2];
  int reap[2];
  if (pipe2(wake, O_CLOEXEC) != 0) {
    close(fd);
    return absl::UnavailableError(Errno("kv server: pipe"));
  }
  // Non-blocking: a finishing connection never blocks on a full pipe (one byte pending already
  // wakes the accept loop), and the loop drains it without blocking.
  if (pipe2(reap, O_CLOEXEC | O_NONBLOCK) != 0) {
    close(fd);
    close(wake[0]);
    close(wake[1]);
    return absl::UnavailableError(Errno("kv server: pipe"));
  }
  SetNonBlocking(fd);
  return std::unique_ptr<TcpKvServer>(
      new TcpKvServer(options, fd, {wake[0], wake[1]}, {reap[0], reap[1]}, port));
}

TcpKvServer::TcpKvServer(const Options& options, int listen_fd, Pipe wake, Pipe reap, int port)
    : options_(options), listen_fd_(listen_fd), wake_(wake), reap_(reap), port_(port) {
  accept_thread_ = std::thread([this] { AcceptLoop(); });
}

TcpKvServer::~TcpKvServer() {
  {
    absl::MutexLock lock(&mu_);
    shutting_down_ = true;
  }
  // Every poll() in the server also watches wake_.read; writing one byte wakes them all (the
  // byte is never read, so the pipe stays readable).
  char byte = 1;
  (void)!write(wake_.write, &byte, 1);
  accept_thread_.join();
  std::map<uint64_t, Connection> connections;
  {
    absl::MutexLock lock(&mu_);
    connections.swap(connections_);
  }
  for (auto& [id, c] : connections) {
    c.thread.join();
    close(c.fd);
  }
  close(listen_fd_);
  close(wake_.read);
  close(wake_.write);
  close(reap_.read);
  close(reap_.write);
}

int TcpKvServer::connection_count() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(connections_.size()) + reaping_;
}

void TcpKvServer::AcceptLoop() {
  bool out_of_fds = false;  // Logged once per episode, not once per 100 ms.
  while (true) {
    pollfd fds[3] = {{listen_fd_, POLLIN, 0}, {wake_.read, POLLIN, 0}, {reap_.read, POLLIN, 0}};
    const int n = poll(fds, 3, -1);
    if (n < 0 && errno != EINTR) {
      SL_LOG(ERROR) << "kv server: poll: " << strerror(errno) << "; stopping the accept loop";
      return;
    }
    if (fds[1].revents != 0) return;  // Shutting down.
    if (fds[2].revents != 0) {
      char drain[64];
      while (read(reap_.read, drain, sizeof(drain)) > 0) {
      }
    }
    ReapFinished();
    if (fds[0].revents == 0) continue;
    if (AcceptOne()) {
      if (out_of_fds) {
        SL_LOG(INFO) << "kv server: accepting connections again";
      }
      out_of_fds = false;
      continue;
    }
    // Out of descriptors: the pending connection stays in the backlog and poll() reports it
    // again at once, so retrying now would spin a core. Wait (shutdown still wakes us).
    if (!out_of_fds) {
      SL_LOG(WARNING) << "kv server on port " << port_ << ": accept4: " << strerror(errno)
                      << "; out of file descriptors, retrying every "
                      << absl::FormatDuration(kAcceptBackoff) << " (raise `ulimit -n`)";
    }
    out_of_fds = true;
    pollfd wake = {wake_.read, POLLIN, 0};
    if (poll(&wake, 1, absl::ToInt64Milliseconds(kAcceptBackoff)) > 0) return;
  }
}

bool TcpKvServer::AcceptOne() {
  sockaddr_storage addr{};
  socklen_t addr_len = sizeof(addr);
  int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &addr_len, SOCK_CLOEXEC);
  if (fd < 0) {
    // EAGAIN (another wake-up) or a connection reset before accept: nothing to wait for.
    return !(errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM);
  }
  SetNonBlocking(fd);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  std::string peer = PeerName(addr);
  absl::MutexLock lock(&mu_);
  if (shutting_down_) {
    close(fd);
    return true;
  }
  if (static_cast<int>(connections_.size()) >= options_.max_connections) {
    SL_LOG(WARNING) << "kv server: refused connection from " << peer << ": " << connections_.size()
                    << " connections open (max_connections)";
    // Best effort: the client reads this as its hello's reply. The socket buffer takes it at
    // once, so this never blocks the accept loop for long.
    (void)WriteAll(fd,
                   EncodeFrame(ErrorReply(absl::ResourceExhaustedError(absl::StrCat(
                       "kv server holds ", connections_.size(),
                       " connections; limit max_connections=", options_.max_connections)))),
                   absl::Now() + absl::Milliseconds(100), -1);
    close(fd);
    return true;
  }
  const uint64_t id = next_connection_id_++;
  Connection& c = connections_[id];
  c.fd = fd;
  c.thread = std::thread([this, id, fd, peer = std::move(peer)] { ServeConnection(id, fd, peer); });
  return true;
}

void TcpKvServer::ReapFinished() {
  std::vector<Connection> done;
  {
    absl::MutexLock lock(&mu_);
    for (uint64_t id : finished_) {
      auto it = connections_.find(id);
      if (it == connections_.end()) continue;
      done.push_back(std::move(it->second));
      connections_.erase(it);
    }
    finished_.clear();
    reaping_ += static_cast<int>(done.size());
  }
  for (Connection& c : done) {
    c.thread.join();
    close(c.fd);
  }
  absl::MutexLock lock(&mu_);
  reaping_ -= static_cast<int>(done.size());
}

absl::Status TcpKvServer::Handshake(int fd) {
  auto check = [](const std::vector<std::string>& fields, uint32_t count,
                  uint32_t length) -> absl::Status {
    if (count != 2) {
      return absl::InvalidArgumentError("the first frame must be the hello [\"hello\", secret]");
    }
    if (length > kMaxHelloField) {
      return absl::InvalidArgumentError(
          absl::StrCat("hello field of ", length, " bytes; limit ", kMaxHelloField));
    }
    return absl::OkStatus();
  };
  absl::StatusOr<std::vector<std::string>> hello = ReadFrame(
      fd, absl::Now() + options_.handshake_timeout, options_.handshake_timeout, wake_.read, check);
  if (!hello.ok()) {
    if (absl::IsDeadlineExceeded(hello.status())) {
      return absl::DeadlineExceededError(
          absl::StrCat("no hello within ", absl::FormatDuration(options_.handshake_timeout)));
    }
    return hello.status();
  }
  if ((*hello)[0] != "hello") {
    return absl::InvalidArgumentError("the first frame must be the hello [\"hello\", secret]");
  }
  if (!ConstantTimeEquals((*hello)[1], options_.secret)) {
    return absl::PermissionDeniedError(
        "wrong store secret (every rank needs rank 0's SHARDLINE_STORE_SECRET)");
  }
  return absl::OkStatus();
}

void TcpKvServer::ServeConnection(uint64_t id, int fd, std::string peer) {
  absl::Status hello = Handshake(fd);
  if (absl::IsUnavailable(hello)) {
    // Closed before its hello (a port probe, a client that gave up): routine, so not a warning.
    SL_LOG(DEBUG) << "kv server: connection from " << peer << " closed before its hello";
  } else if (!hello.ok() && !absl::IsCancelled(hello)) {
    SL_LOG(WARNING) << "kv server: closing connection from " << peer
                    << " that failed the handshake: " << hello.message();
    (void)WriteAll(fd, EncodeFrame(ErrorReply(hello)), absl::Now() + absl::Seconds(1), wake_.read);
  }
  if (hello.ok()) {
    (void)WriteAll(fd, EncodeFrame({"ok"}), absl::Now() + options_.request_timeout, wake_.read);
  }
  while (hello.ok()) {
    absl::StatusOr<std::vector<std::string>> request = ReadRequest(fd);
    if (!request.ok()) {
      // A refused length leaves unread bytes behind: say why, then drop the connection.
      if (absl::IsResourceExhausted(request.status()) ||
          absl::IsInvalidArgument(request.status())) {
        SL_LOG(WARNING) << "kv server: closing connection from " << peer << ": "
                        << request.status().message();
        (void)WriteAll(fd, EncodeFrame(ErrorReply(request.status())),
                       absl::Now() + absl::Seconds(1), wake_.read);
        DiscardInputBriefly(fd, wake_.read);
      }
      break;  // Client went away, stalled mid-request, or shutdown.
    }
    std::vector<std::string> reply = Handle(*request);
    if (!WriteAll(fd, EncodeFrame(reply), absl::Now() + options_.request_timeout, wake_.read)
             .ok()) {
      break;
    }
  }
  // The accept loop (or the destructor) joins this thread and closes the fd; shut it down so the
  // client sees EOF now.
  shutdown(fd, SHUT_RDWR);
  absl::MutexLock lock(&mu_);
  finished_.push_back(id);
  char byte = 1;
  (void)!write(reap_.write, &byte, 1);
}

absl::StatusOr<std::vector<std::string>> TcpKvServer::ReadRequest(int fd) {
  size_t total = 0;
  auto check = [&](const std::vector<std::string>& fields, uint32_t count,
                   uint32_t length) -> absl::Status {
    const size_t index = fields.size();
    const bool set = !fields.empty() && fields[0] == "set";
    const bool get = !fields.empty() && fields[0] == "get";
    if (index == 0 && length > 8) {
      return absl::InvalidArgumentError(absl::StrCat("request command of ", length, " bytes"));
    }
    if (index > 0 && !set && !get) {
      return absl::InvalidArgumentError(absl::StrCat("unknown request \"", fields[0], "\""));
    }
    if (set && count != 3) {
      return absl::InvalidArgumentError("a set request is [\"set\", key, value]");
    }
    if (set && index == 2 && length > options_.max_value_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "value of ", length, " bytes; limit max_value_bytes=", options_.max_value_bytes));
    }
    if (get && index == 1 && length > 20) {
      return absl::InvalidArgumentError(absl::StrCat("get timeout of ", length, " bytes"));
    }
    const bool key = (set && index == 1) || (get && index >= 2);
    if (key && length > options_.max_key_bytes) {
      return absl::ResourceExhaustedError(
          absl::StrCat("key of ", length, " bytes; limit max_key_bytes=", options_.max_key_bytes));
    }
    total += length;
    if (total > options_.max_request_bytes) {
      return absl::ResourceExhaustedError(
          absl::StrCat("request of more than ", options_.max_request_bytes,
                       " bytes; limit max_request_bytes=", options_.max_request_bytes));
    }
    return absl::OkStatus();
  };
  return ReadFrame(fd, absl::InfiniteFuture(), options_.request_timeout, wake_.read, check);
}

std::vector<std::string> TcpKvServer::HandleSetLocked(const std::string& key,
                                                      const std::string& value) {
  auto it = data_.find(key);
  const size_t old_bytes = it == data_.end() ? 0 : it->first.size() + it->second.size();
  if (it == data_.end() && data_.size() >= options_.max_keys) {
    return ErrorReply(absl::ResourceExhaustedError(absl::StrCat(
        "kv server holds ", data_.size(), " keys; limit max_keys=", options_.max_keys)));
  }
  const size_t new_total = data_bytes_ - old_bytes + key.size() + value.size();
  if (new_total > options_.max_total_bytes) {
    return ErrorReply(absl::ResourceExhaustedError(
        absl::StrCat("setting ", key, " would make the kv server hold ", new_total,
                     " bytes; limit max_total_bytes=", options_.max_total_bytes)));
  }
  data_bytes_ = new_total;
  data_[key] = value;
  return {"ok"};
}

std::vector<std::string> TcpKvServer::Handle(const std::vector<std::string>& request) {
  if (request.size() == 3 && request[0] == "set") {
    absl::MutexLock lock(&mu_);
    return HandleSetLocked(request[1], request[2]);
  }
  int64_t timeout_ms = 0;
  if (request.size() >= 2 && request[0] == "get" && absl::SimpleAtoi(request[1], &timeout_ms)) {
    const absl::Time deadline = absl::Now() + absl::Milliseconds(timeout_ms);
    auto all_present_or_stop = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      if (shutting_down_) return true;
      for (size_t i = 2; i < request.size(); ++i) {
        if (data_.count(request[i]) == 0) return false;
      }
      return true;
    };
    std::set<absl::string_view> distinct;
    for (size_t i = 2; i < request.size(); ++i) {
      if (!distinct.insert(request[i]).second) {
        return ErrorReply(absl::InvalidArgumentError(
            absl::StrCat("get names key ", request[i], " more than once")));
      }
    }
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithDeadline(absl::Condition(&all_present_or_stop), deadline);
    size_t reply_bytes = 0;
    for (size_t i = 2; i < request.size(); ++i) {
      auto it = data_.find(request[i]);
      if (it != data_.end()) reply_bytes += it->second.size();
    }
    if (reply_bytes > options_.max_reply_bytes) {
      return ErrorReply(absl::ResourceExhaustedError(
          absl::StrCat("the values of ", request.size() - 2, " keys add up to ", reply_bytes,
                       " bytes; limit max_reply_bytes=", options_.max_reply_bytes)));
    }
    std::vector<std::string> reply = {"ok"};
    std::vector<std::string> missing = {"timeout"};
    for (size_t i = 2; i < request.size(); ++i) {
      auto it = data_.find(request[i]);
      if (it == data_.end()) {
        missing.push_back(request[i]);
      } else {
        reply.push_back(it->second);
      }
    }
    if (shutting_down_ && missing.size() > 1) {
      return ErrorReply(absl::UnavailableError("server shutting down"));
    }
    return missing.size() > 1 ? missing : reply;
  }
  return ErrorReply(absl::InvalidArgumentError("malformed request"));
}

}  // namespace shardline::fsdp
