// MetricsHttpServer against real sockets: routes, concurrency with a slow client, the whole-request
// deadline, and a Stop() that slow clients cannot hold up.
#include "coordinator/http/metrics_http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shardline::coordinator {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

int Connect(const std::string& address) {
  const size_t colon = address.rfind(':');
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(colon + 1))));
  inet_pton(AF_INET, address.substr(0, colon).c_str(), &addr.sin_addr);
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

// Sends `request` and reads until the server closes.
std::string Exchange(const std::string& address, const std::string& request) {
  const int fd = Connect(address);
  if (fd < 0) return "connect failed";
  (void)!send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) out.append(buf, n);
  close(fd);
  return out;
}

std::string Get(const std::string& address, const std::string& path,
                const std::string& headers = "") {
  return Exchange(address, "GET " + path + " HTTP/1.0\r\nHost: x\r\n" + headers + "\r\n");
}

// 127.0.0.1 and the port of an endpoint bound to 0.0.0.0 (off loopback: every interface).
std::string ViaLoopback(const std::string& address) {
  return "127.0.0.1" + address.substr(address.rfind(':'));
}

std::shared_ptr<const UserTable> OneUser(const std::string& token) {
  auto users = UserTable::Create("", token);  // the legacy single user "admin"
  EXPECT_TRUE(users.ok()) << users.status();
  return users.ok() ? std::shared_ptr<const UserTable>(std::move(*users)) : nullptr;
}

std::unique_ptr<MetricsHttpServer> Start(MetricsHttpOptions options = MetricsHttpOptions()) {
  auto s = MetricsHttpServer::Start(
      "127.0.0.1:0", [] { return "shardline_up 1\n"; }, options);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(*s) : nullptr;
}

TEST(MetricsHttpServer, ServesMetricsAndRefusesOtherPathsAndMethods) {
  auto server = Start();
  const std::string metrics = Get(server->address(), "/metrics");
  EXPECT_THAT(metrics, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(metrics, HasSubstr("Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"));
  EXPECT_THAT(metrics, HasSubstr("\r\n\r\nshardline_up 1\n"));
  const std::string other = Get(server->address(), "/other");
  EXPECT_THAT(other, StartsWith("HTTP/1.1 404 Not Found\r\n"));
  EXPECT_THAT(other, HasSubstr("see /metrics\n"));
  const std::string post =
      Exchange(server->address(), "POST /metrics HTTP/1.0\r\nContent-Length: 0\r\n\r\n");
  EXPECT_THAT(post, StartsWith("HTTP/1.1 405 Method Not Allowed\r\n"));
  EXPECT_THAT(post, HasSubstr("only GET /metrics\n"));
}

TEST(MetricsHttpServer, RejectsMalformedAddressAndOptions) {
  auto bad = MetricsHttpServer::Start("no-port", [] { return ""; });
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "metrics address must be host:port, got \"no-port\"");
  MetricsHttpOptions zero;
  zero.threads = 0;
  auto none = MetricsHttpServer::Start(
      "127.0.0.1:0", [] { return ""; }, zero);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(none.status().message()), HasSubstr("--metrics_threads"));
}

TEST(MetricsHttpServer, SlowClientDoesNotDelayAScrape) {
  auto server = Start();
  const int slow = Connect(server->address());
  ASSERT_GE(slow, 0);
  ASSERT_EQ(send(slow, "GET /metr", 9, MSG_NOSIGNAL), 9);  // ... and nothing more
  absl::SleepFor(absl::Milliseconds(100));
  const absl::Time start = absl::Now();
  EXPECT_THAT(Get(server->address(), "/metrics"), StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  close(slow);
}

TEST(MetricsHttpServer, TricklingClientIsCutOffAtTheRequestDeadline) {
  MetricsHttpOptions options;
  options.request_timeout = absl::Milliseconds(500);
  auto server = Start(options);
  const int slow = Connect(server->address());
  ASSERT_GE(slow, 0);
  // A byte every 100 ms never lets a per-read timeout fire; the whole-request deadline does.
  std::atomic<bool> closed{false};
  std::thread trickle([&] {
    const std::string header = "GET /metrics HTTP/1.0\r\nX-Slow: " + std::string(100, 'a');
    for (char c : header) {
      if (closed || send(slow, &c, 1, MSG_NOSIGNAL) != 1) return;
      absl::SleepFor(absl::Milliseconds(100));
    }
  });
  const absl::Time start = absl::Now();
  char byte;
  ssize_t n;
  while ((n = recv(slow, &byte, 1, 0)) > 0) {
  }
  closed = true;
  EXPECT_LT(absl::Now() - start, absl::Seconds(3)) << "the server kept the trickling client";
  trickle.join();
  close(slow);
}

TEST(MetricsHttpServer, StopReturnsWithinASecondWhileSlowClientsHoldEveryThread) {
  MetricsHttpOptions options;
  options.threads = 2;
  options.request_timeout = absl::Minutes(5);
  auto server = Start(options);
  std::vector<int> slow;
  for (int i = 0; i < 4; ++i) {  // Two hold the pool's threads, two wait in its queue.
    const int fd = Connect(server->address());
    ASSERT_GE(fd, 0);
    ASSERT_EQ(send(fd, "GET /", 5, MSG_NOSIGNAL), 5);
    slow.push_back(fd);
  }
  absl::SleepFor(absl::Milliseconds(200));
  const absl::Time start = absl::Now();
  server->Stop();
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  for (int fd : slow) close(fd);
}

TEST(MetricsHttpServer, OffLoopbackAScrapeNeedsTheScrapeTokenOrAUserToken) {
  auto auth = MetricsAuth::Create("0.0.0.0:0", OneUser("user-token"), "scrape-token",
                                  /*insecure=*/false);
  ASSERT_TRUE(auth.ok()) << auth.status();
  auto s = MetricsHttpServer::Start(
      "0.0.0.0:0", [] { return "shardline_up 1\n"; }, MetricsHttpOptions(), *std::move(auth));
  ASSERT_TRUE(s.ok()) << s.status();
  const std::string address = ViaLoopback((*s)->address());
  const std::string none = Get(address, "/metrics");
  EXPECT_THAT(none, StartsWith("HTTP/1.1 401 Unauthorized\r\n"));
  EXPECT_THAT(none, HasSubstr("WWW-Authenticate: Bearer realm=\"shardline metrics\"\r\n"));
  EXPECT_THAT(none, HasSubstr("metrics need \"Authorization: Bearer <token>\": the scrape token "
                              "(--metrics_token_file) or a user token\n"));
  EXPECT_THAT(none, ::testing::Not(HasSubstr("shardline_up")));
  const std::string wrong = Get(address, "/metrics", "Authorization: Bearer guess\r\n");
  EXPECT_THAT(wrong, StartsWith("HTTP/1.1 401 Unauthorized\r\n"));
  EXPECT_THAT(wrong, HasSubstr("wrong token: neither the scrape token nor a user's\n"));
  EXPECT_THAT(Get(address, "/metrics", "Authorization: Basic c2NyYXBlLXRva2Vu\r\n"),
              StartsWith("HTTP/1.1 401 Unauthorized\r\n"));
  for (const char* token : {"scrape-token", "user-token"}) {
    const std::string ok =
        Get(address, "/metrics", std::string("Authorization: Bearer ") + token + "\r\n");
    EXPECT_THAT(ok, StartsWith("HTTP/1.1 200 OK\r\n")) << token;
    EXPECT_THAT(ok, HasSubstr("\r\n\r\nshardline_up 1\n")) << token;
  }
}

TEST(MetricsHttpServer, LoopbackStaysOpenUnlessAScrapeTokenIsSetAndOffLoopbackNeedsSomeToken) {
  auto loopback = MetricsAuth::Create("127.0.0.1:9090", OneUser("u"), "", false);
  ASSERT_TRUE(loopback.ok());
  EXPECT_FALSE(loopback->required());  // as today: a local Prometheus scrapes without a token
  EXPECT_TRUE(loopback->Check("").ok());
  auto with_token = MetricsAuth::Create("127.0.0.1:9090", nullptr, "scrape", false);
  ASSERT_TRUE(with_token.ok());
  EXPECT_TRUE(with_token->required());
  EXPECT_EQ(with_token->Check("Bearer u").code(), absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(with_token->Check("Bearer scrape").ok());
  auto users_only = MetricsAuth::Create("10.0.0.5:9090", OneUser("u"), "", false);
  ASSERT_TRUE(users_only.ok());
  EXPECT_TRUE(users_only->required());
  EXPECT_TRUE(users_only->Check("Bearer u").ok());
  auto nothing = MetricsAuth::Create("10.0.0.5:9090", nullptr, "", false);
  EXPECT_EQ(nothing.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(nothing.status().message(),
            "refusing to serve metrics on non-loopback address 10.0.0.5:9090 without a token to "
            "check: set --metrics_token_file (or users: --users_file, --token_file), or "
            "--insecure to let anyone who can reach it read them");
  auto insecure = MetricsAuth::Create("10.0.0.5:9090", nullptr, "", true);
  ASSERT_TRUE(insecure.ok());
  EXPECT_FALSE(insecure->required());
}

TEST(MetricsHttpServer, ConnectionsBeyondTheThreadsAndTheQueueAreRefusedAtOnce) {
  MetricsHttpOptions options;
  options.threads = 1;
  options.max_queued = 2;
  options.request_timeout = absl::Seconds(2);
  auto server = Start(options);
  std::vector<int> slow;
  for (int i = 0; i < 3; ++i) {  // one holds the thread, two wait in the queue
    const int fd = Connect(server->address());
    ASSERT_GE(fd, 0);
    ASSERT_EQ(send(fd, "GET /", 5, MSG_NOSIGNAL), 5);
    slow.push_back(fd);
  }
  absl::SleepFor(absl::Milliseconds(200));
  const absl::Time start = absl::Now();
  const std::string refused = Get(server->address(), "/metrics");
  EXPECT_THAT(refused, StartsWith("HTTP/1.1 503 Service Unavailable\r\n"));
  EXPECT_THAT(refused, HasSubstr("\r\n\r\ntoo many connections; try again in a while\n"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  for (int fd : slow) close(fd);
  // Once they are gone, scrapes are served again.
  absl::Time deadline = absl::Now() + absl::Seconds(10);
  std::string again;
  while (absl::Now() < deadline &&
         !absl::StartsWith(again = Get(server->address(), "/metrics"), "HTTP/1.1 200")) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_THAT(again, StartsWith("HTTP/1.1 200 OK\r\n"));
}

}  // namespace
}  // namespace shardline::coordinator
