#include "coordinator/http_server.h"

#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
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
class DeadlineStream : public httplib::Stream {
 public:
  DeadlineStream(int fd, absl::Time read_deadline, absl::Duration write_timeout)
      : fd_(fd), read_deadline_(read_deadline), write_timeout_(write_timeout) {}

  bool is_readable() const override {
    return buffered_ < filled_ || WaitReady(fd_, POLLIN, read_deadline_);
  }
  bool is_writable() const override { return WaitReady(fd_, POLLOUT, WriteDeadline()); }

  ssize_t read(char* ptr, size_t size) override {
    // httplib reads request lines a byte at a time: serve them from a buffer.
    if (buffered_ == filled_) {
      if (!is_readable()) return -1;
      ssize_t n;
      do {
        n = recv(fd_, buffer_, sizeof(buffer_), 0);
      } while (n < 0 && errno == EINTR);
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
  // The response's deadline starts with its first write.
  absl::Time WriteDeadline() const {
    if (write_deadline_ == absl::InfiniteFuture()) write_deadline_ = absl::Now() + write_timeout_;
    return write_deadline_;
  }

  const int fd_;
  const absl::Time read_deadline_;
  const absl::Duration write_timeout_;
  mutable absl::Time write_deadline_ = absl::InfiniteFuture();
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

}  // namespace

// httplib serves each accepted connection through process_and_close_socket; this override keeps
// the set of open connections so Stop() can shut them down (httplib's own stop() only closes
// the listening socket and then waits for its threads), and reads through DeadlineStream.
class HttpServer::Impl : public httplib::Server {
 public:
  explicit Impl(const HttpServerOptions& options) : options_(options) {
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
      DeadlineStream stream(fd, absl::Now() + options_.request_timeout, options_.write_timeout);
      bool closed = false;
      served = process_request(stream, /*close_connection=*/true, closed, nullptr);
      // Out of the set before close: ShutdownConnections never touches a reused fd number.
      absl::MutexLock lock(&mu_);
      open_.erase(fd);
    }
    shutdown(fd, SHUT_RDWR);
    close(fd);
    return served;
  }

  const HttpServerOptions options_;
  absl::Mutex mu_;
  std::set<int> open_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

HttpServer::HttpServer() = default;

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const std::string& listen,
                                                              const Routes& routes,
                                                              const HttpServerOptions& options,
                                                              absl::string_view what,
                                                              absl::string_view options_flags) {
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
  const std::string host = listen.substr(0, colon);
  std::unique_ptr<HttpServer> s(new HttpServer());
  s->http_ = std::make_unique<Impl>(options);
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
