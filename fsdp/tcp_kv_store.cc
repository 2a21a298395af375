#include "fsdp/tcp_kv_store.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace shardline::fsdp {
namespace {

// Largest frame we accept: bootstrap values are addresses and ids, a few KiB at most.
constexpr uint32_t kMaxField = 64u << 20;
constexpr uint32_t kMaxFields = 1u << 16;

std::string Errno(absl::string_view what) { return absl::StrCat(what, ": ", strerror(errno)); }

// Waits until `fd` is ready for `events` or `deadline` passes or `wake_fd` becomes readable.
// Returns OK when ready; DEADLINE_EXCEEDED / CANCELLED otherwise.
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

void PutU32(std::string* out, uint32_t v) {
  const uint32_t be = htonl(v);
  out->append(reinterpret_cast<const char*>(&be), 4);
}

std::string EncodeFrame(const std::vector<std::string>& fields) {
  std::string out;
  PutU32(&out, fields.size());
  for (const std::string& f : fields) {
    PutU32(&out, f.size());
    out.append(f);
  }
  return out;
}

absl::StatusOr<uint32_t> ReadU32(int fd, absl::Time deadline, int wake_fd) {
  uint32_t be;
  absl::Status s = ReadAll(fd, reinterpret_cast<char*>(&be), 4, deadline, wake_fd);
  if (!s.ok()) return s;
  return ntohl(be);
}

absl::StatusOr<std::vector<std::string>> ReadFrame(int fd, absl::Time deadline, int wake_fd) {
  absl::StatusOr<uint32_t> count = ReadU32(fd, deadline, wake_fd);
  if (!count.ok()) return count.status();
  if (*count > kMaxFields) return absl::UnavailableError("kv frame: too many fields");
  std::vector<std::string> fields(*count);
  for (std::string& f : fields) {
    absl::StatusOr<uint32_t> len = ReadU32(fd, deadline, wake_fd);
    if (!len.ok()) return len.status();
    if (*len > kMaxField) return absl::UnavailableError("kv frame: field too large");
    f.resize(*len);
    absl::Status s = ReadAll(fd, f.data(), *len, deadline, wake_fd);
    if (!s.ok()) return s;
  }
  return fields;
}

void SetNonBlocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

// Resolves host:port into a list of addresses to try.
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

}  // namespace

// ---- Server ------------------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<TcpKvServer>> TcpKvServer::Create(const Options& options) {
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
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
    close(fd);
    return absl::UnavailableError(Errno("kv server: pipe"));
  }
  SetNonBlocking(fd);
  return std::unique_ptr<TcpKvServer>(new TcpKvServer(fd, pipe_fds[0], pipe_fds[1], port));
}

TcpKvServer::TcpKvServer(int listen_fd, int wake_read, int wake_write, int port)
    : listen_fd_(listen_fd), wake_read_(wake_read), wake_write_(wake_write), port_(port) {
  accept_thread_ = std::thread([this] { AcceptLoop(); });
}

TcpKvServer::~TcpKvServer() {
  {
    absl::MutexLock lock(&mu_);
    shutting_down_ = true;
  }
  // Every poll() in the server also watches wake_read_; writing one byte wakes them all (the
  // byte is never read, so the pipe stays readable).
  char byte = 1;
  (void)!write(wake_write_, &byte, 1);
  accept_thread_.join();
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    threads.swap(connection_threads_);
  }
  for (std::thread& t : threads) t.join();
  {
    absl::MutexLock lock(&mu_);
    for (int fd : connection_fds_) close(fd);
  }
  close(listen_fd_);
  close(wake_read_);
  close(wake_write_);
}

void TcpKvServer::AcceptLoop() {
  while (true) {
    absl::Status ready = WaitFd(listen_fd_, POLLIN, absl::InfiniteFuture(), wake_read_);
    if (!ready.ok()) return;  // Shutting down.
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;  // EAGAIN (another wake-up) or a connection reset before accept.
    SetNonBlocking(fd);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    absl::MutexLock lock(&mu_);
    if (shutting_down_) {
      close(fd);
      return;
    }
    connection_fds_.push_back(fd);
    connection_threads_.emplace_back([this, fd] { ServeConnection(fd); });
  }
}

void TcpKvServer::ServeConnection(int fd) {
  while (true) {
    absl::StatusOr<std::vector<std::string>> request =
        ReadFrame(fd, absl::InfiniteFuture(), wake_read_);
    if (!request.ok()) break;  // Client went away or shutdown.
    std::vector<std::string> reply = Handle(*request);
    if (!WriteAll(fd, EncodeFrame(reply), absl::Now() + absl::Seconds(60), wake_read_).ok()) {
      break;
    }
  }
  // Closing the fd here would race with the destructor's close; shut it down instead so the
  // client sees EOF, and let the destructor close it.
  shutdown(fd, SHUT_RDWR);
}

std::vector<std::string> TcpKvServer::Handle(const std::vector<std::string>& request) {
  if (request.size() == 3 && request[0] == "set") {
    absl::MutexLock lock(&mu_);
    data_[request[1]] = request[2];
    return {"ok"};
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
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithDeadline(absl::Condition(&all_present_or_stop), deadline);
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
    if (shutting_down_ && missing.size() > 1) return {"error", "server shutting down"};
    return missing.size() > 1 ? missing : reply;
  }
  return {"error", "malformed request"};
}

// ---- Client ------------------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<TcpKvStore>> TcpKvStore::Create(const Options& options) {
  std::unique_ptr<TcpKvServer> server;
  int port = options.port;
  if (options.serve) {
    absl::StatusOr<std::unique_ptr<TcpKvServer>> created =
        TcpKvServer::Create({options.host, options.port});
    if (!created.ok()) return created.status();
    server = std::move(*created);
    port = server->port();
  } else if (port <= 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv store: port ", port, " is not a valid server port"));
  }
  return std::unique_ptr<TcpKvStore>(new TcpKvStore(options, std::move(server), port));
}

TcpKvStore::TcpKvStore(Options options, std::unique_ptr<TcpKvServer> server, int port)
    : options_(std::move(options)), server_(std::move(server)), port_(port) {}

TcpKvStore::~TcpKvStore() {
  absl::MutexLock lock(&mu_);
  for (int fd : idle_fds_) close(fd);
  idle_fds_.clear();
  // server_ (if any) is destroyed after this body, closing the remaining connections.
}

absl::StatusOr<int> TcpKvStore::Acquire() {
  {
    absl::MutexLock lock(&mu_);
    if (!idle_fds_.empty()) {
      int fd = idle_fds_.back();
      idle_fds_.pop_back();
      return fd;
    }
  }
  const absl::Time deadline = absl::Now() + options_.connect_timeout;
  std::string last_error;
  while (true) {
    absl::StatusOr<addrinfo*> addrs = Resolve(options_.host, port_, /*passive=*/false);
    if (addrs.ok()) {
      for (addrinfo* a = *addrs; a != nullptr; a = a->ai_next) {
        int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) continue;
        // Non-blocking connect, so an unreachable host costs at most the deadline rather than
        // the kernel's SYN retries (minutes).
        SetNonBlocking(fd);
        int rc = connect(fd, a->ai_addr, a->ai_addrlen);
        if (rc != 0 && errno == EINPROGRESS) {
          absl::Status ready = WaitFd(fd, POLLOUT, deadline, -1);
          int err = 0;
          socklen_t len = sizeof(err);
          if (ready.ok() && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0) {
            rc = err == 0 ? 0 : -1;
            errno = err;
          } else {
            rc = -1;
            errno = ETIMEDOUT;
          }
        }
        if (rc == 0) {
          freeaddrinfo(*addrs);
          int one = 1;
          setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
          return fd;
        }
        last_error = Errno("connect");
        close(fd);
      }
      freeaddrinfo(*addrs);
    } else {
      last_error = std::string(addrs.status().message());
    }
    if (absl::Now() >= deadline) {
      return absl::UnavailableError(
          absl::StrCat("kv store: cannot reach server ", options_.host, ":", port_, " within ",
                       absl::FormatDuration(options_.connect_timeout), ": ", last_error));
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
}

void TcpKvStore::Release(int fd) {
  absl::MutexLock lock(&mu_);
  idle_fds_.push_back(fd);
}

absl::StatusOr<std::vector<std::string>> TcpKvStore::Call(const std::vector<std::string>& request,
                                                          absl::Time deadline) {
  absl::StatusOr<int> fd = Acquire();
  if (!fd.ok()) return fd.status();
  absl::Status sent = WriteAll(*fd, EncodeFrame(request), deadline, -1);
  absl::StatusOr<std::vector<std::string>> reply =
      sent.ok() ? ReadFrame(*fd, deadline, -1) : absl::StatusOr<std::vector<std::string>>(sent);
  if (!reply.ok()) {
    close(*fd);  // The stream may hold half a frame: never reuse it.
    return absl::UnavailableError(absl::StrCat("kv store: server ", options_.host, ":", port_, ": ",
                                               reply.status().message()));
  }
  Release(*fd);
  return reply;
}

absl::Status TcpKvStore::Set(absl::string_view key, absl::string_view value) {
  absl::StatusOr<std::vector<std::string>> reply =
      Call({"set", std::string(key), std::string(value)},
           absl::Now() + options_.connect_timeout + absl::Seconds(60));
  if (!reply.ok()) return reply.status();
  if (reply->empty() || (*reply)[0] != "ok") {
    return absl::UnavailableError(
        absl::StrCat("kv store: set ", key, " failed: ", absl::StrJoin(*reply, " ")));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> TcpKvStore::Get(const std::vector<std::string>& keys,
                                                         absl::Duration timeout) {
  std::vector<std::string> request = {"get", absl::StrCat(absl::ToInt64Milliseconds(timeout))};
  request.insert(request.end(), keys.begin(), keys.end());
  // The server enforces `timeout`; the socket deadline only guards against a server that hangs.
  absl::StatusOr<std::vector<std::string>> reply =
      Call(request, absl::Now() + timeout + options_.connect_timeout + absl::Seconds(10));
  if (!reply.ok()) return reply.status();
  if (!reply->empty() && (*reply)[0] == "ok" && reply->size() == keys.size() + 1) {
    return std::vector<std::string>(reply->begin() + 1, reply->end());
  }
  if (!reply->empty() && (*reply)[0] == "timeout") {
    return absl::DeadlineExceededError(
        absl::StrCat("kv store: timed out after ", absl::FormatDuration(timeout),
                     " waiting for keys: ", absl::StrJoin(reply->begin() + 1, reply->end(), ", ")));
  }
  return absl::UnavailableError(absl::StrCat("kv store: get failed: ", absl::StrJoin(*reply, " ")));
}

}  // namespace shardline::fsdp
