#include "coordinator/server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "client/client.h"
#include "google/protobuf/unknown_field_set.h"
#include "gtest/gtest.h"

namespace shardline::coordinator {
namespace {

TEST(CoordinatorServer, NonLoopbackNeedsBothTokensUnlessInsecure) {
  ServerOptions o;
  o.listen = "0.0.0.0:0";
  o.user_token = "u";  // worker token missing
  auto s = CoordinatorServer::Create(o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.status().message().find("--worker_token"), std::string::npos);
  o.worker_token = "w";
  auto ok = CoordinatorServer::Create(o);
  ASSERT_TRUE(ok.ok()) << ok.status();
  (*ok)->Shutdown();
}

TEST(CoordinatorServer, TlsNeedsCertificateAndKeyTogether) {
  ServerOptions o;
  o.tls_cert_pem = "-----BEGIN CERTIFICATE-----";
  EXPECT_EQ(CoordinatorServer::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  ServerOptions ca_only;
  ca_only.tls_client_ca_pem = "-----BEGIN CERTIFICATE-----";
  EXPECT_EQ(CoordinatorServer::Create(ca_only).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(CoordinatorServer, GrpcBoundsBelowOneAreInvalidArgument) {
  ServerOptions o;
  o.grpc_max_concurrent_streams = 0;
  auto s = CoordinatorServer::Create(o);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("--grpc_max_concurrent_streams"), std::string::npos)
      << s.status();
}

JobSpec SmallSpec() {
  JobSpec spec;
  spec.set_name("x");
  spec.set_world_size(2);
  spec.mutable_fsdp()->set_sharding_strategy(FsdpSpec::FULL_SHARD);
  return spec;
}

TEST(CoordinatorServer, RequestOverMaxReceiveMessageSizeIsResourceExhausted) {
  ServerOptions o;
  o.grpc_max_receive_message_bytes = 64 << 10;
  auto server = CoordinatorServer::Create(o);
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = *client::CoordinatorClient::Create((*server)->address(), "");
  JobSpec big = SmallSpec();
  big.mutable_data()->set_path(std::string(100 << 10, 'p'));
  auto refused = client->SubmitJob(big);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
  EXPECT_NE(refused.status().message().find("larger than max"), std::string::npos)
      << refused.status();
  auto job = client->SubmitJob(SmallSpec());
  EXPECT_TRUE(job.ok()) << job.status();
  (*server)->Shutdown();
}

TEST(CoordinatorServer, ClientListsEveryJobPageByPage) {
  ServerOptions o;
  o.max_list_page_size = 7;  // the default page is 7 jobs: 30 take 5 pages
  auto server = CoordinatorServer::Create(o);
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = *client::CoordinatorClient::Create((*server)->address(), "");
  std::vector<std::string> ids;
  for (int i = 0; i < 30; ++i) {
    auto job = client->SubmitJob(SmallSpec());
    ASSERT_TRUE(job.ok()) << job.status();
    ids.push_back(*job);
  }
  auto jobs = client->ListJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  std::vector<std::string> listed;
  for (const JobStatus& j : *jobs) listed.push_back(j.job_id());
  EXPECT_EQ(listed, ids);
  (*server)->Shutdown();
}

TEST(CoordinatorServer, SpecWithUnknownFieldsIsRefusedAtSubmit) {
  auto server = CoordinatorServer::Create(ServerOptions());
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = *client::CoordinatorClient::Create((*server)->address(), "");
  JobSpec spec = SmallSpec();
  spec.mutable_train()
      ->GetReflection()
      ->MutableUnknownFields(spec.mutable_train())
      ->AddVarint(4242, 1);
  auto refused = client->SubmitJob(spec);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
  EXPECT_NE(refused.status().message().find("train.#4242: unknown field"), std::string::npos)
      << refused.status();
  auto jobs = client->ListJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_TRUE(jobs->empty()) << "a refused spec is not stored";
  (*server)->Shutdown();
}

// A loopback TCP proxy that holds back the server's first bytes (its HTTP/2 SETTINGS frame) for
// `delay`: what a coordinator on a loaded machine or a slow link looks like to a client.
class SlowHandshakeProxy {
 public:
  SlowHandshakeProxy(int target_port, absl::Duration delay)
      : target_port_(target_port), delay_(delay) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    listen(listen_fd_, 8);
    socklen_t len = sizeof(a);
    getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    acceptor_ = std::thread([this] { Accept(); });
  }
  ~SlowHandshakeProxy() {
    stop_ = true;
    shutdown(listen_fd_, SHUT_RDWR);
    close(listen_fd_);
    acceptor_.join();
    for (int fd : fds_) shutdown(fd, SHUT_RDWR);
    for (std::thread& t : pumps_) t.join();
    for (int fd : fds_) close(fd);
  }
  int port() const { return port_; }

 private:
  void Accept() {
    while (!stop_) {
      int client = accept(listen_fd_, nullptr, nullptr);
      if (client < 0) return;
      int server = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      a.sin_port = htons(target_port_);
      if (connect(server, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
        close(client);
        close(server);
        continue;
      }
      fds_.push_back(client);
      fds_.push_back(server);
      pumps_.emplace_back([client, server] { Pump(client, server, absl::ZeroDuration()); });
      pumps_.emplace_back([this, client, server] { Pump(server, client, delay_); });
    }
  }
  static void Pump(int from, int to, absl::Duration first_delay) {
    char buf[16384];
    bool first = true;
    for (;;) {
      ssize_t n = read(from, buf, sizeof(buf));
      if (n <= 0) break;
      if (first) absl::SleepFor(first_delay);
      first = false;
      if (write(to, buf, n) != n) break;
    }
    shutdown(to, SHUT_WR);
  }
  int target_port_;
  absl::Duration delay_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
  std::vector<int> fds_;  // Touched by the acceptor, then by the destructor after joining it.
  std::vector<std::thread> pumps_;
};

// Regression: the client once gave a connection attempt 100 ms (gRPC's MIN_RECONNECT_BACKOFF is
// the per-attempt connect deadline), so a coordinator slow to send SETTINGS looked unreachable.
TEST(CoordinatorClient, ToleratesASlowHandshake) {
  ServerOptions o;
  auto server = CoordinatorServer::Create(o);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = (*server)->address();
  const int port = std::stoi(address.substr(address.rfind(':') + 1));
  {
    SlowHandshakeProxy proxy(port, absl::Milliseconds(600));
    auto client =
        *client::CoordinatorClient::Create("127.0.0.1:" + std::to_string(proxy.port()), "");
    auto jobs = client->ListJobs();
    EXPECT_TRUE(jobs.ok()) << jobs.status();
  }
  (*server)->Shutdown();
}

TEST(CoordinatorServer, ServesInProcessAndShutsDownWithAnOpenWatch) {
  ServerOptions o;
  o.user_token = "t";
  auto server = CoordinatorServer::Create(o);
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = *client::CoordinatorClient::Create((*server)->address(), "t");
  JobSpec spec;
  spec.set_name("x");
  spec.set_world_size(2);
  spec.mutable_fsdp()->set_sharding_strategy(FsdpSpec::FULL_SHARD);
  auto job = client->SubmitJob(spec);
  ASSERT_TRUE(job.ok()) << job.status();
  absl::Status watch;
  absl::Notification watching;  // the watch's first status arrived: the stream is open
  std::thread watcher([&] {
    watch = client->WatchJob(*job, [&](const JobStatus&) {
      if (!watching.HasBeenNotified()) watching.Notify();
      return true;
    });
  });
  ASSERT_TRUE(watching.WaitForNotificationWithTimeout(absl::Seconds(60)));
  (*server)->Shutdown();
  watcher.join();
  EXPECT_EQ(watch.code(), absl::StatusCode::kUnavailable) << watch;
}

}  // namespace
}  // namespace shardline::coordinator
