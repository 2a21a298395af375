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
#include <functional>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/constant_time.h"
#include "common/logging.h"

namespace shardline::fsdp {
namespace {

// Largest reply field and field count a client accepts: the server's caps are lower.
constexpr uint32_t kMaxReplyField = 64u << 20;
constexpr uint32_t kMaxFields = 1u << 16;
// The hello: ["hello", secret]; secrets are a few dozen bytes.
constexpr uint32_t kMaxHelloField = 4096;
// How long the accept loop waits after accept4 ran out of descriptors before it tries again.
constexpr absl::Duration kAcceptBackoff = absl::Milliseconds(100);

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

// Says whether the field at `index`, declared `length` bytes long after `fields`, may be read.
using FieldCheck = std::function<absl::Status(const std::vector<std::string>& fields,
                                              uint32_t count, uint32_t length)>;

// Reads one frame. The first u32 may wait until `first_deadline` (an idle connection); the rest
// of the frame must arrive by `rest_deadline` (computed once the frame starts). `check` sees
// every declared length before its bytes are allocated.
absl::StatusOr<std::vector<std::string>> ReadFrame(int fd, absl::Time first_deadline,
                                                   absl::Duration rest_timeout, int wake_fd,
                                                   const FieldCheck& check) {
  absl::StatusOr<uint32_t> count = ReadU32(fd, first_deadline, wake_fd);
  if (!count.ok()) return count.status();
  const absl::Time deadline = absl::Now() + rest_timeout;
  if (*count > kMaxFields) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv frame of ", *count, " fields; limit ", kMaxFields));
  }
  std::vector<std::string> fields;
  while (fields.size() < *count) {
    absl::StatusOr<uint32_t> len = ReadU32(fd, deadline, wake_fd);
    if (!len.ok()) return len.status();
    absl::Status allowed = check(fields, *count, *len);
    if (!allowed.ok()) return allowed;
    std::string f(*len, '\0');
    absl::Status s = ReadAll(fd, f.data(), *len, deadline, wake_fd);
    if (!s.ok()) return s;
    fields.push_back(std::move(f));
  }
  return fields;
}

// Closing a socket with unread input resets the connection, and the reset can destroy the
// error reply before a client still sending its request reads it. So stop sending, then read
// and drop what the client still sends (through a fixed buffer) until it closes, for up to 1 s.
void DiscardInputBriefly(int fd, int wake_fd) {
  shutdown(fd, SHUT_WR);
  const absl::Time deadline = absl::Now() + absl::Seconds(1);
  char buffer[16384];
  while (WaitFd(fd, POLLIN, deadline, wake_fd).ok()) {
    ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) return;
  }
}

// Clients trust the server they chose to reach, within a sanity bound.
absl::Status CheckReplyField(const std::vector<std::string>&, uint32_t, uint32_t length) {
  if (length > kMaxReplyField) return absl::UnavailableError("kv frame: field too large");
  return absl::OkStatus();
}

std::vector<std::string> ErrorReply(const absl::Status& status) {
  return {"error", absl::StrCat(static_cast<int>(status.code())), std::string(status.message())};
}

// The status an ["error", code, message] reply carries (UNKNOWN for any other reply).
absl::Status StatusFromReply(const std::vector<std::string>& reply) {
  int code = 0;
  if (reply.size() == 3 && reply[0] == "error" && absl::SimpleAtoi(reply[1], &code) && code > 0 &&
      code <= static_cast<int>(absl::StatusCode::kUnauthenticated)) {
    return absl::Status(static_cast<absl::StatusCode>(code), reply[2]);
  }
  return absl::UnknownError(absl::StrCat("unexpected reply: ", absl::StrJoin(reply, " ")));
}

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
  if (options.max_connections < 1 || options.max_keys < 1 || options.max_key_bytes < 1 ||
      options.max_value_bytes < 1 || options.max_total_bytes < 1 || options.max_request_bytes < 1) {
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
  return static_cast<int>(connections_.size());
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
  }
  for (Connection& c : done) {
    c.thread.join();
    close(c.fd);
  }
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
    if (shutting_down_ && missing.size() > 1) {
      return ErrorReply(absl::UnavailableError("server shutting down"));
    }
    return missing.size() > 1 ? missing : reply;
  }
  return ErrorReply(absl::InvalidArgumentError("malformed request"));
}

// ---- Client ------------------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<TcpKvStore>> TcpKvStore::Create(const Options& options) {
  std::unique_ptr<TcpKvServer> server;
  int port = options.port;
  if (options.serve) {
    TcpKvServer::Options server_options = options.server;
    server_options.host = options.host;
    server_options.port = options.port;
    server_options.secret = options.secret;
    absl::StatusOr<std::unique_ptr<TcpKvServer>> created = TcpKvServer::Create(server_options);
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

absl::StatusOr<int> TcpKvStore::Connect(absl::Time deadline, std::string* last_error) {
  absl::StatusOr<addrinfo*> addrs = Resolve(options_.host, port_, /*passive=*/false);
  if (!addrs.ok()) {
    *last_error = std::string(addrs.status().message());
    return addrs.status();
  }
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
    *last_error = Errno("connect");
    close(fd);
  }
  freeaddrinfo(*addrs);
  return absl::UnavailableError(*last_error);
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
  std::string last_error = "no address";
  while (true) {
    absl::StatusOr<int> fd = Connect(deadline, &last_error);
    if (fd.ok()) {
      // The hello. A refusal (wrong secret, too many connections) is final; a connection that
      // breaks during it is retried like a refused connect (the server may be restarting).
      const absl::Time hello_deadline = std::min(deadline, absl::Now() + absl::Seconds(30));
      absl::Status sent =
          WriteAll(*fd, EncodeFrame({"hello", options_.secret}), hello_deadline, -1);
      absl::StatusOr<std::vector<std::string>> reply =
          sent.ok() ? ReadFrame(*fd, hello_deadline, absl::Seconds(30), -1, CheckReplyField)
                    : absl::StatusOr<std::vector<std::string>>(sent);
      if (reply.ok() && reply->size() == 1 && (*reply)[0] == "ok") return *fd;
      close(*fd);
      if (reply.ok()) {
        absl::Status refused = StatusFromReply(*reply);
        return absl::Status(refused.code(),
                            absl::StrCat("kv store: server ", options_.host, ":", port_,
                                         " refused the connection: ", refused.message()));
      }
      last_error = absl::StrCat("hello: ", reply.status().message());
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
  // A server that refuses a request while it is still being sent (a value over a cap) replies
  // with the reason before it closes: read that rather than report the broken pipe.
  const absl::Time reply_deadline =
      sent.ok() ? deadline : std::min(deadline, absl::Now() + absl::Seconds(1));
  absl::StatusOr<std::vector<std::string>> reply =
      ReadFrame(*fd, reply_deadline, reply_deadline - absl::Now(), -1, CheckReplyField);
  if (!reply.ok() || !sent.ok()) {
    close(*fd);  // The stream may hold half a frame: never reuse it.
  }
  if (!reply.ok()) {
    return absl::UnavailableError(absl::StrCat("kv store: server ", options_.host, ":", port_, ": ",
                                               (sent.ok() ? reply.status() : sent).message()));
  }
  if (!sent.ok()) return reply;
  if (!reply->empty() && (*reply)[0] == "error") {
    close(*fd);  // The server may have closed its end after refusing (a length over a cap).
    return reply;
  }
  Release(*fd);
  return reply;
}

absl::Status TcpKvStore::Set(absl::string_view key, absl::string_view value) {
  absl::StatusOr<std::vector<std::string>> reply =
      Call({"set", std::string(key), std::string(value)},
           absl::Now() + options_.connect_timeout + absl::Seconds(60));
  if (!reply.ok()) return reply.status();
  if (reply->size() == 1 && (*reply)[0] == "ok") return absl::OkStatus();
  absl::Status refused = StatusFromReply(*reply);
  return absl::Status(refused.code(),
                      absl::StrCat("kv store: set ", key, " failed: ", refused.message()));
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
  absl::Status refused = StatusFromReply(*reply);
  return absl::Status(refused.code(), absl::StrCat("kv store: get failed: ", refused.message()));
}

}  // namespace shardline::fsdp
