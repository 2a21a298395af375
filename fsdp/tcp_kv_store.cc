#include "fsdp/tcp_kv_store.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "fsdp/tcp_kv_socket.h"
#include "fsdp/tcp_kv_wire.h"

namespace shardline::fsdp {

using tcp_kv::CheckReplyField;
using tcp_kv::EncodeFrame;
using tcp_kv::Errno;
using tcp_kv::ReadFrame;
using tcp_kv::Resolve;
using tcp_kv::SetNonBlocking;
using tcp_kv::StatusFromReply;
using tcp_kv::WaitFd;
using tcp_kv::WriteAll;

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
