#include "coordinator/server.h"

#include "coordinator/client.h"
#include "gtest/gtest.h"

namespace shardline::coordinator {
namespace {

TEST(IsLoopbackListenAddress, RecognisesLoopbackForms) {
  for (const char* a : {"127.0.0.1:0", "127.1.2.3:7070", "localhost:7070", "[::1]:7070",
                        "unix:/tmp/coordinator.sock"}) {
    EXPECT_TRUE(IsLoopbackListenAddress(a)) << a;
  }
  for (const char* a : {"0.0.0.0:7070", "[::]:7070", ":7070", "10.1.2.3:7070",
                        "coordinator.example.com:7070", "128.0.0.1:1"}) {
    EXPECT_FALSE(IsLoopbackListenAddress(a)) << a;
  }
}

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
  EXPECT_EQ(CoordinatorServer::Create(ca_only).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CoordinatorServer, ServesInProcessAndShutsDownWithAnOpenWatch) {
  ServerOptions o;
  o.user_token = "t";
  auto server = CoordinatorServer::Create(o);
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = *CoordinatorClient::Create((*server)->address(), "t");
  JobSpec spec;
  spec.set_name("x");
  spec.set_world_size(2);
  spec.mutable_fsdp()->set_sharding_strategy(FsdpSpec::FULL_SHARD);
  auto job = client->SubmitJob(spec);
  ASSERT_TRUE(job.ok()) << job.status();
  absl::Status watch;
  std::thread watcher([&] { watch = client->WatchJob(*job, [](const JobStatus&) { return true; }); });
  absl::SleepFor(absl::Milliseconds(200));
  (*server)->Shutdown();
  watcher.join();
  EXPECT_EQ(watch.code(), absl::StatusCode::kUnavailable) << watch;
}

}  // namespace
}  // namespace shardline::coordinator
