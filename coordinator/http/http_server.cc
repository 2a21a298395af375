#include "coordinator/http/http_server.h"

#include <fcntl.h>
#include <httplib.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <deque>
#include <set>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace shardline::coordinator {

namespace {

// Milliseconds left until `deadline` for poll(), at least 0.
int MillisUntil(absl::Time deadline) {
  return static_cast<int>(
      std::clamp<int64_t>(absl::ToInt64Milliseconds(deadline - absl::Now()) + 1, 0, 1 << 30));
}

// True when `fd` is ready for `events` before `deadline`.
bool WaitReady(int fd, short events, absl::Time deadline) {
  while (true) {
    pollfd p{fd, events, 0};
    const int n = poll(&p, 1, MillisUntil(deadline));
    if (n < 0 && errno == EINTR) continue;
    return n > 0;
  }
}

void IpAndPort(const sockaddr_storage& addr, std::string& ip, int& port) {
  char host[INET6_ADDRSTRLEN] = "";
  if (addr.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&addr);
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
    port = ntohs(a->sin_port);
  } else if (addr.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&addr);
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
    port = ntohs(a->sin6_port);
  }
  ip = host;
}

// An httplib::Stream over one connection whose whole request must arrive by one deadline and
// whose whole response must leave by another: httplib's own stream times out each read, so a
// client sending a byte a second could hold a thread for hours.
//
// Over TLS (`ssl` set, the socket non-blocking) it reads and writes through OpenSSL, waiting for
// whichever direction OpenSSL asks for within the same deadlines.
class DeadlineStream : public httplib::Stream {
 public:
  DeadlineStream(int fd, absl::Time read_deadline, absl::Duration write_timeout, SSL* ssl = nullptr)
      : fd_(fd), read_deadline_(read_deadline), write_timeout_(write_timeout), ssl_(ssl) {}

  bool is_readable() const override {
    return buffered_ < filled_ || (ssl_ != nullptr && SSL_pending(ssl_) > 0) ||
           WaitReady(fd_, POLLIN, read_deadline_);
  }
  bool is_writable() const override { return WaitReady(fd_, POLLOUT, WriteDeadline()); }

  ssize_t read(char* ptr, size_t size) override {
    // httplib reads request lines a byte at a time: serve them from a buffer.
    if (buffered_ == filled_) {
      const ssize_t n = ssl_ != nullptr ? TlsRead() : PlainRead();
      if (n <= 0) return n;
      buffered_ = 0;
      filled_ = static_cast<size_t>(n);
    }
    const size_t n = std::min(size, filled_ - buffered_);
    std::copy(buffer_ + buffered_, buffer_ + buffered_ + n, ptr);
    buffered_ += n;
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (ssl_ != nullptr) {
      if (size == 0) return 0;
      while (true) {  // a retry after WANT_* must repeat the same arguments
        const int n = SSL_write(ssl_, ptr, static_cast<int>(std::min<size_t>(size, 1 << 30)));
        if (n > 0) return n;
        if (!TlsWait(n, WriteDeadline())) return -1;
      }
    }
    if (!is_writable()) return -1;
    ssize_t n;
    do {
      n = send(fd_, ptr, size, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    return n;
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    port = 0;
    if (getpeername(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) IpAndPort(addr, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    port = 0;
    if (getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) IpAndPort(addr, ip, port);
  }
  ::socket_t socket() const override { return fd_; }

 private:
  ssize_t PlainRead() {
    if (!is_readable()) return -1;
    ssize_t n;
    do {
      n = recv(fd_, buffer_, sizeof(buffer_), 0);
    } while (n < 0 && errno == EINTR);
    return n;
  }

  ssize_t TlsRead() {
    while (true) {
      const int n = SSL_read(ssl_, buffer_, sizeof(buffer_));
      if (n > 0) return n;
      if (!TlsWait(n, read_deadline_)) return -1;
    }
  }

  // After an SSL_read/SSL_write that returned `ret`: waits until the socket is ready the way
  // OpenSSL wants it; false when that was an error or the deadline passed.
  bool TlsWait(int ret, absl::Time deadline) const {
    switch (SSL_get_error(ssl_, ret)) {
      case SSL_ERROR_WANT_READ:
        return WaitReady(fd_, POLLIN, deadline);
      case SSL_ERROR_WANT_WRITE:
        return WaitReady(fd_, POLLOUT, deadline);
      default:
        return false;
    }
  }

  // The response's deadline starts with its first write.
  absl::Time WriteDeadline() const {
    if (write_deadline_ == absl::InfiniteFuture()) write_deadline_ = absl::Now() + write_timeout_;
    return write_deadline_;
  }

  const int fd_;
  const absl::Time read_deadline_;
  const absl::Duration write_timeout_;
  mutable absl::Time write_deadline_ = absl::InfiniteFuture();
  SSL* const ssl_;
  char buffer_[4096];
  size_t buffered_ = 0;  // Next unread byte in buffer_.
  size_t filled_ = 0;
};

// Set on the accept thread while BoundedPool refuses a connection (runs its task there).
thread_local bool t_refusing = false;

// httplib 0.11.4 (Debian's) queues every accepted connection in its ThreadPool without a bound,
// and its enqueue cannot refuse: a client opening connections faster than the pool serves them
// would hold a descriptor each, and delay every scrape behind them, as long as it liked. This
// pool holds at most `threads` connections being served plus `max_queued` waiting; past that it
// runs the task at once on the accept thread with t_refusing set, and the connection is
// answered 503 and closed without reading it.
class BoundedPool : public httplib::TaskQueue {
 public:
  BoundedPool(int threads, int max_queued)
      : limit_(static_cast<size_t>(threads) + static_cast<size_t>(max_queued)) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Work(); });
  }

  void enqueue(std::function<void()> fn) override {
    bool refuse;
    {
      absl::MutexLock lock(&mu_);
      refuse = busy_ + jobs_.size() >= limit_;
      if (!refuse) jobs_.push_back(std::move(fn));
    }
    if (refuse) {
      t_refusing = true;
      fn();
      t_refusing = false;
    }
  }

  // Runs what is queued (the server is stopping: each closes at once), then joins.
  void shutdown() override {
    {
      absl::MutexLock lock(&mu_);
      shutdown_ = true;
    }
    for (std::thread& t : threads_) t.join();
  }

 private:
  void Work() {
    while (true) {
      std::function<void()> fn;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(
            +[](BoundedPool* p)
                 ABSL_NO_THREAD_SAFETY_ANALYSIS { return !p->jobs_.empty() || p->shutdown_; },
            this));
        if (jobs_.empty()) return;  // shut down and drained
        fn = std::move(jobs_.front());
        jobs_.pop_front();
        ++busy_;
      }
      fn();
      absl::MutexLock lock(&mu_);
      --busy_;
    }
  }

  const size_t limit_;
  absl::Mutex mu_;
  std::deque<std::function<void()>> jobs_ ABSL_GUARDED_BY(mu_);
  size_t busy_ ABSL_GUARDED_BY(mu_) = 0;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

// What a refused connection gets: sent without waiting (the accept thread must not block), so a
// client that does not read it just loses it.
void RefuseBusy(int fd) {
  static constexpr char kBusy[] =
      "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 43\r\n"
      "Connection: close\r\n\r\ntoo many connections; try again in a while\n";
  (void)!send(fd, kBusy, sizeof(kBusy) - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
}

struct SslCtxFree {
  void operator()(SSL_CTX* c) const { SSL_CTX_free(c); }
};
using SslCtx = std::unique_ptr<SSL_CTX, SslCtxFree>;

// A server context for `cert_pem` (leaf first, then its chain) and `key_pem`. Errors:
// INVALID_ARGUMENT naming `what` when either does not parse or they do not match.
absl::StatusOr<SslCtx> ServerContext(const std::string& cert_pem, const std::string& key_pem,
                                     absl::string_view what) {
  SslCtx ctx(SSL_CTX_new(TLS_server_method()));
  if (ctx == nullptr) return absl::InternalError("SSL_CTX_new failed");
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  auto bad = [what](const char* part) {
    ERR_clear_error();
    return absl::InvalidArgumentError(
        absl::StrCat(what, " TLS: ", part, " (--tls_cert / --tls_key)"));
  };
  BIO* certs = BIO_new_mem_buf(cert_pem.data(), static_cast<int>(cert_pem.size()));
  X509* leaf = PEM_read_bio_X509(certs, nullptr, nullptr, nullptr);
  const bool leaf_ok = leaf != nullptr && SSL_CTX_use_certificate(ctx.get(), leaf) == 1;
  X509_free(leaf);
  while (leaf_ok) {  // the rest of the chain; the context owns each one added
    X509* extra = PEM_read_bio_X509(certs, nullptr, nullptr, nullptr);
    if (extra == nullptr) break;
    if (SSL_CTX_add_extra_chain_cert(ctx.get(), extra) != 1) X509_free(extra);
  }
  BIO_free(certs);
  if (!leaf_ok) return bad("the certificate does not load");
  BIO* keys = BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size()));
  EVP_PKEY* key = PEM_read_bio_PrivateKey(keys, nullptr, nullptr, nullptr);
  BIO_free(keys);
  const bool key_ok = key != nullptr && SSL_CTX_use_PrivateKey(ctx.get(), key) == 1;
  EVP_PKEY_free(key);
  if (!key_ok) return bad("the private key does not load");
  if (SSL_CTX_check_private_key(ctx.get()) != 1)
    return bad("the key does not match the certificate");
  ERR_clear_error();
  return ctx;
}

// The TLS handshake of `ssl` over non-blocking `fd`, within `deadline`; false when it failed.
bool Handshake(SSL* ssl, int fd, absl::Time deadline) {
  while (true) {
    const int r = SSL_accept(ssl);
    if (r == 1) return true;
    const int e = SSL_get_error(ssl, r);
    if (!((e == SSL_ERROR_WANT_READ && WaitReady(fd, POLLIN, deadline)) ||
          (e == SSL_ERROR_WANT_WRITE && WaitReady(fd, POLLOUT, deadline)))) {
      ERR_clear_error();
      return false;
    }
  }
}

}  // namespace

// httplib serves each accepted connection through process_and_close_socket; this override keeps
// the set of open connections so Stop() can shut them down (httplib's own stop() only closes
// the listening socket and then waits for its threads), and reads through DeadlineStream.
class HttpServer::Impl : public httplib::Server {
 public:
  Impl(const HttpServerOptions& options, SslCtx tls) : options_(options), tls_(std::move(tls)) {
    const int threads = options.threads;
    const int max_queued = options.max_queued;
    new_task_queue = [threads, max_queued] { return new BoundedPool(threads, max_queued); };
  }

  // Shuts down every open connection (their reads and writes fail at once) and every one
  // accepted from now on.
  void ShutdownConnections() {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    for (int fd : open_) shutdown(fd, SHUT_RDWR);
  }

 private:
  bool process_and_close_socket(::socket_t fd) override {
    if (t_refusing) {
      RefuseBusy(fd);
      shutdown(fd, SHUT_RDWR);
      close(fd);
      return false;
    }
    bool served = false;
    bool stopping;
    {
      absl::MutexLock lock(&mu_);
      stopping = stopping_;
      if (!stopping) open_.insert(fd);
    }
    if (!stopping) {
      served = tls_ != nullptr ? ServeTls(fd) : ServePlain(fd);
      // Out of the set before close: ShutdownConnections never touches a reused fd number.
      absl::MutexLock lock(&mu_);
      open_.erase(fd);
    }
    shutdown(fd, SHUT_RDWR);
    close(fd);
    return served;
  }

  bool ServePlain(int fd) {
    DeadlineStream stream(fd, absl::Now() + options_.request_timeout, options_.write_timeout);
    bool closed = false;
    return process_request(stream, /*close_connection=*/true, closed, nullptr);
  }

  bool ServeTls(int fd) {
    const absl::Time read_deadline = absl::Now() + options_.request_timeout;
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    SSL* ssl = SSL_new(tls_.get());
    bool served = false;
    if (ssl != nullptr && SSL_set_fd(ssl, fd) == 1 && Handshake(ssl, fd, read_deadline)) {
      DeadlineStream stream(fd, read_deadline, options_.write_timeout, ssl);
      bool closed = false;
      served = process_request(stream, /*close_connection=*/true, closed, nullptr);
      SSL_shutdown(ssl);  // one try: the close_notify, never waiting for the client's
    }
    SSL_free(ssl);
    ERR_clear_error();
    return served;
  }

  const HttpServerOptions options_;
  const SslCtx tls_;  // null: plain HTTP
  absl::Mutex mu_;
  std::set<int> open_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

HttpServer::HttpServer() = default;

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(
    const std::string& listen, const Routes& routes, const HttpServerOptions& options,
    absl::string_view what, absl::string_view options_flags, const OnBound& on_bound) {
  const size_t colon = listen.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(listen.substr(colon + 1), &port) ||
      port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " address must be host:port, got \"", listen, "\""));
  }
  if (options.threads < 1 || options.max_queued < 0 ||
      options.request_timeout <= absl::ZeroDuration() ||
      options.write_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " server: ", options_flags, " must be positive"));
  }
  SslCtx tls;
  if (options.tls_cert_pem.empty() != options.tls_key_pem.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " TLS needs both a certificate and its private key"));
  }
  if (!options.tls_cert_pem.empty()) {
    auto ctx = ServerContext(options.tls_cert_pem, options.tls_key_pem, what);
    if (!ctx.ok()) return ctx.status();
    tls = *std::move(ctx);
    // OpenSSL writes to the socket with write(2), not send(MSG_NOSIGNAL): a client that hangs
    // up mid-response would otherwise kill the process with SIGPIPE (gRPC ignores it too).
    signal(SIGPIPE, SIG_IGN);
  }
  const std::string host = listen.substr(0, colon);
  std::unique_ptr<HttpServer> s(new HttpServer());
  s->http_ = std::make_unique<Impl>(options, std::move(tls));
  Impl& http = *s->http_;
  http.set_address_family(AF_INET);
  routes(http);
  const int bound =
      port == 0 ? http.bind_to_any_port(host) : (http.bind_to_port(host, port) ? port : -1);
  if (bound <= 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", listen, ": ",
                                               errno != 0 ? std::strerror(errno) : "bind failed"));
  }
  s->address_ = absl::StrCat(host, ":", bound);
  if (on_bound) {
    if (absl::Status st = on_bound(s->address_); !st.ok()) return st;
  }
  s->thread_ = std::thread([&http] { http.listen_after_bind(); });
  // stop() is a no-op until the accept loop runs: wait for it, so Stop() always ends it.
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (!http.is_running() && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(1));
  return s;
}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Stop() {
  if (!thread_.joinable()) return;
  http_->stop();                 // Closes the port; the accept loop ends.
  http_->ShutdownConnections();  // Open requests fail at once, so the pool's join is prompt.
  thread_.join();
}

}  // namespace shardline::coordinator
