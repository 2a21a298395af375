#include "client/client_tls.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "client/client.h"
#include "gtest/gtest.h"

namespace shardline::client {
namespace {

std::string TempFile(const std::string& name, const std::string& content) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
  std::ofstream(path, std::ios::trunc) << content;
  return path;
}

constexpr char kPem[] = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";

TEST(LoadClientTls, ReadsCaCertAndKeyContents) {
  ClientTlsFiles f{TempFile("ca.pem", kPem), TempFile("c.pem", kPem),
                   TempFile("c.key", "-----BEGIN PRIVATE KEY-----\nBBBB\n"), false};
  CoordinatorClient::Options o;
  ASSERT_TRUE(LoadClientTls(f, kClientTlsFlags, &o).ok());
  EXPECT_EQ(o.tls_root_certs, kPem);
  EXPECT_EQ(o.tls_cert_chain, kPem);
  EXPECT_EQ(o.tls_private_key, "-----BEGIN PRIVATE KEY-----\nBBBB\n");
  EXPECT_FALSE(o.insecure);
}

TEST(LoadClientTls, MissingFileNamesTheSettingAndThePath) {
  CoordinatorClient::Options o;
  absl::Status s = LoadClientTls({"/no/such/ca.pem", "", "", false}, kClientTlsFlags, &o);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "--tls_ca: cannot read /no/such/ca.pem");
  s = LoadClientTls({"/no/such/ca.pem", "", "", false}, kClientTlsEnv, &o);
  EXPECT_EQ(s.message(), "SHARDLINE_TLS_CA: cannot read /no/such/ca.pem");
}

TEST(LoadClientTls, RefusesANonPemFile) {
  CoordinatorClient::Options o;
  const std::string path = TempFile("token-not-pem", "abc\n");
  const absl::Status s = LoadClientTls({path, "", "", false}, kClientTlsFlags, &o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "--tls_ca: " + path + " is not a PEM file");
}

TEST(LoadClientTls, CertNeedsKeyAndCa) {
  CoordinatorClient::Options o;
  const std::string pem = TempFile("x.pem", kPem);
  absl::Status s = LoadClientTls({pem, pem, "", false}, kClientTlsFlags, &o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--tls_cert and --tls_key go together"), std::string::npos);
  s = LoadClientTls({"", pem, pem, false}, kClientTlsFlags, &o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--tls_cert needs --tls_ca"), std::string::npos);
}

TEST(ClientTlsEnv, RoundTripsThroughTheEnvironmentAndOverridesEveryEntry) {
  const ClientTlsFiles f{"/etc/ca.pem", "", "", true};
  const std::map<std::string, std::string> env = ClientTlsEnv(f);
  EXPECT_EQ(env.size(), 4u);
  EXPECT_EQ(env.at("SHARDLINE_TLS_CA"), "/etc/ca.pem");
  EXPECT_EQ(env.at("SHARDLINE_TLS_CERT"), "");
  const ClientTlsFiles back = ClientTlsFilesFromEnv([&env](const char* n) -> const char* {
    auto it = env.find(n);
    return it == env.end() ? nullptr : it->second.c_str();
  });
  EXPECT_EQ(back.ca, "/etc/ca.pem");
  EXPECT_TRUE(back.insecure);
  const std::map<std::string, std::string> none = ClientTlsEnv({});
  EXPECT_EQ(none.at("SHARDLINE_INSECURE"), "");
  EXPECT_FALSE(ClientTlsFilesFromEnv([&none](const char* n) -> const char* {
                 return none.at(n).c_str();
               }).insecure);
}

TEST(ClientTlsEnv, RelativePathsAreHandedOnAbsoluteForAChildInAnotherDirectory) {
  // A worker started as `worker --tls_ca=certs/ca.pem` runs its trainers in their rank
  // directories, where "certs/ca.pem" does not exist.
  const std::string cwd = std::filesystem::current_path().string();
  const std::map<std::string, std::string> env =
      ClientTlsEnv({"certs/ca.pem", "./certs/../certs/node.pem", "/abs/node.key", false});
  EXPECT_EQ(env.at("SHARDLINE_TLS_CA"), cwd + "/certs/ca.pem");
  EXPECT_EQ(env.at("SHARDLINE_TLS_CERT"), cwd + "/certs/node.pem");
  EXPECT_EQ(env.at("SHARDLINE_TLS_KEY"), "/abs/node.key");
  EXPECT_EQ(ClientTlsEnv({}).at("SHARDLINE_TLS_CA"), "");
}

TEST(CoordinatorClient, RefusesAClearTextTokenToANonLoopbackAddress) {
  CoordinatorClient::Options o;
  o.address = "192.0.2.7:7070";
  o.token = "secret";
  auto c = CoordinatorClient::Create(o);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(c.status().message().find("refusing to send the token in clear text to "
                                      "192.0.2.7:7070"),
            std::string::npos)
      << c.status();
  EXPECT_NE(c.status().message().find("--tls_ca=CA.pem"), std::string::npos);
  EXPECT_NE(c.status().message().find("--insecure"), std::string::npos);
}

TEST(CoordinatorClient, AllowsLoopbackTlsInsecureOrNoToken) {
  CoordinatorClient::Options o;
  o.token = "secret";
  for (const char* loopback : {"127.0.0.1:7070", "localhost:7070", "[::1]:7070"}) {
    o.address = loopback;
    EXPECT_TRUE(CoordinatorClient::Create(o).ok()) << loopback;
  }
  o.address = "192.0.2.7:7070";
  o.insecure = true;
  EXPECT_TRUE(CoordinatorClient::Create(o).ok());
  o.insecure = false;
  o.tls_root_certs = kPem;
  EXPECT_TRUE(CoordinatorClient::Create(o).ok());
  o.tls_root_certs.clear();
  o.token.clear();
  EXPECT_TRUE(CoordinatorClient::Create(o).ok());
}

}  // namespace
}  // namespace shardline::client
