// TLS and mutual TLS for workers, against the real coordinator binary. Certificates are made at
// test time with the openssl command (a CA, a server certificate for 127.0.0.1, a worker client
// certificate, and a client certificate from another CA).
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "coordinator/testing/coordinator_process.h"
#include "gtest/gtest.h"

namespace shardline::coordinator {
namespace {

std::string Dir() { return absl::StrCat(std::getenv("TEST_TMPDIR"), "/tls"); }

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool Shell(const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()) == 0; }

// Makes <name>.key/.pem signed by CA <ca> (or a self-signed CA when ca is empty).
bool MakeCert(const std::string& name, const std::string& cn, const std::string& ca,
              const std::string& san) {
  const std::string d = Dir();
  if (ca.empty()) {
    return Shell(absl::StrCat("openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=", cn,
                              " -keyout ", d, "/", name, ".key -out ", d, "/", name, ".pem"));
  }
  std::ofstream(absl::StrCat(d, "/", name, ".ext"))
      << (san.empty() ? "basicConstraints=CA:FALSE\n" : absl::StrCat("subjectAltName=", san, "\n"));
  return Shell(absl::StrCat("openssl req -newkey rsa:2048 -nodes -subj /CN=", cn, " -keyout ", d,
                            "/", name, ".key -out ", d, "/", name, ".csr")) &&
         Shell(absl::StrCat("openssl x509 -req -days 1 -in ", d, "/", name, ".csr -CA ", d, "/", ca,
                            ".pem -CAkey ", d, "/", ca, ".key -CAcreateserial -out ", d, "/", name,
                            ".pem -extfile ", d, "/", name, ".ext"));
}

class TlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    Shell("mkdir -p " + Dir());
    ok_ = MakeCert("ca", "shardline-test-ca", "", "") &&
          MakeCert("server", "127.0.0.1", "ca", "IP:127.0.0.1") &&
          MakeCert("worker", "node-a", "ca", "") && MakeCert("worker_b", "node-b", "ca", "") &&
          MakeCert("other_ca", "someone-else", "", "") &&
          MakeCert("stranger", "node-x", "other_ca", "");
  }
  void SetUp() override {
    if (!ok_) GTEST_SKIP() << "the openssl command could not make test certificates";
    const std::string d = Dir();
    CoordinatorProcess::Options o;
    o.binary = CoordinatorBinaryPath();
    o.args = {"--listen=127.0.0.1:0",
              "--token=user-token",
              "--worker_token=join-token",
              absl::StrCat("--tls_cert=", d, "/server.pem"),
              absl::StrCat("--tls_key=", d, "/server.key"),
              absl::StrCat("--tls_client_ca=", d, "/ca.pem")};
    auto p = CoordinatorProcess::Start(o);
    ASSERT_TRUE(p.ok()) << p.status();
    proc_ = std::move(*p);
  }
  std::unique_ptr<client::CoordinatorClient> Client(const std::string& token, bool tls,
                                                    const std::string& cert = "") {
    client::CoordinatorClient::Options o;
    o.address = proc_->address();
    o.token = token;
    o.timeout = absl::Seconds(5);
    if (tls) o.tls_root_certs = Read(Dir() + "/ca.pem");
    if (!cert.empty()) {
      o.tls_cert_chain = Read(absl::StrCat(Dir(), "/", cert, ".pem"));
      o.tls_private_key = Read(absl::StrCat(Dir(), "/", cert, ".key"));
    }
    return *client::CoordinatorClient::Create(o);
  }
  static RegisterWorkerRequest Req() {
    RegisterWorkerRequest r;
    r.set_node_name("node-a");
    Slot* s = r.add_slots();
    s->set_kind(Slot::CPU);
    return r;
  }

  static bool ok_;
  std::unique_ptr<CoordinatorProcess> proc_;
};
bool TlsTest::ok_ = false;

TEST_F(TlsTest, UsersConnectOverTlsWithTokensAndPlaintextIsRefused) {
  auto user = Client("user-token", /*tls=*/true);
  auto jobs = user->ListJobs();
  EXPECT_TRUE(jobs.ok()) << jobs.status();
  auto plain = Client("user-token", /*tls=*/false);
  EXPECT_EQ(plain->ListJobs().status().code(), absl::StatusCode::kUnavailable);
  // TLS does not replace the token.
  EXPECT_EQ(Client("", true)->ListJobs().status().code(), absl::StatusCode::kUnauthenticated);
}

TEST_F(TlsTest, WorkerDaemonCallsNeedAClientCertificateFromTheClientCa) {
  auto no_cert = Client("join-token", true);
  auto r = no_cert->RegisterWorker(Req());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnauthenticated) << r.status();
  EXPECT_NE(r.status().message().find("client certificate"), std::string::npos);
  // A certificate from another CA fails the handshake.
  auto stranger = Client("join-token", true, "stranger");
  EXPECT_FALSE(stranger->RegisterWorker(Req()).ok());
  // The right certificate still needs the join token.
  EXPECT_EQ(Client("wrong", true, "worker")->RegisterWorker(Req()).status().code(),
            absl::StatusCode::kUnauthenticated);
  auto worker = Client("join-token", true, "worker");
  auto ok = worker->RegisterWorker(Req());
  ASSERT_TRUE(ok.ok()) << ok.status();
  HeartbeatRequest hb;
  hb.set_worker_id(ok->worker_id());
  EXPECT_FALSE(worker->Heartbeat(hb)->reregister());
  // The certificate names node-a: it cannot register or heartbeat as another node.
  RegisterWorkerRequest other = Req();
  other.set_node_name("node-b");
  auto impostor = worker->RegisterWorker(other);
  EXPECT_EQ(impostor.status().code(), absl::StatusCode::kPermissionDenied) << impostor.status();
  auto b = Client("join-token", true, "worker_b")->RegisterWorker(other);
  ASSERT_TRUE(b.ok()) << b.status();
  HeartbeatRequest as_b;
  as_b.set_worker_id(b->worker_id());
  EXPECT_EQ(worker->Heartbeat(as_b).status().code(), absl::StatusCode::kPermissionDenied);
  // Trainers' calls (rendezvous, reports) need no certificate but an attempt credential, which
  // the join token is not.
  EXPECT_EQ(no_cert->RendezvousSet("job-1/1", "s", "k", "v").code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(Client("user-token", true)->ListWorkers()->size(), 2u);
}

}  // namespace
}  // namespace shardline::coordinator
