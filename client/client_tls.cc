#include "client/client_tls.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace shardline::client {
namespace {

// `path` against the working directory when relative; "" stays "" (and a path whose directory
// cannot be resolved stays as given).
std::string Absolute(const std::string& path) {
  if (path.empty()) return path;
  std::error_code ec;
  std::filesystem::path abs = std::filesystem::absolute(path, ec);
  return ec ? path : abs.lexically_normal().string();
}

absl::StatusOr<std::string> ReadPem(const std::string& path, const char* name) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(name, ": cannot read ", path));
  std::stringstream s;
  s << in.rdbuf();
  if (s.str().find("-----BEGIN ") == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": ", path, " is not a PEM file"));
  }
  return s.str();
}

}  // namespace

absl::Status LoadClientTls(const ClientTlsFiles& files, const ClientTlsNames& names,
                           CoordinatorClient::Options* options) {
  options->insecure = files.insecure;
  if (files.cert.empty() != files.key.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(names.cert, " and ", names.key,
                                                   " go together (the client certificate and its "
                                                   "private key)"));
  }
  if (!files.cert.empty() && files.ca.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        names.cert, " needs ", names.ca, " (the CA that signed the coordinator's certificate)"));
  }
  if (files.ca.empty()) return absl::OkStatus();
  auto ca = ReadPem(files.ca, names.ca);
  if (!ca.ok()) return ca.status();
  options->tls_root_certs = *ca;
  if (files.cert.empty()) return absl::OkStatus();
  auto cert = ReadPem(files.cert, names.cert);
  if (!cert.ok()) return cert.status();
  auto key = ReadPem(files.key, names.key);
  if (!key.ok()) return key.status();
  options->tls_cert_chain = *cert;
  options->tls_private_key = *key;
  return absl::OkStatus();
}

std::map<std::string, std::string> ClientTlsEnv(const ClientTlsFiles& files) {
  return {{kClientTlsEnv.ca, Absolute(files.ca)},
          {kClientTlsEnv.cert, Absolute(files.cert)},
          {kClientTlsEnv.key, Absolute(files.key)},
          {kClientTlsEnv.insecure, files.insecure ? "1" : ""}};
}

ClientTlsFiles ClientTlsFilesFromEnv(const std::function<const char*(const char*)>& getenv_in) {
  auto get = [&getenv_in](const char* name) -> std::string {
    const char* v = getenv_in ? getenv_in(name) : std::getenv(name);
    return v != nullptr ? v : "";
  };
  ClientTlsFiles f;
  f.ca = get(kClientTlsEnv.ca);
  f.cert = get(kClientTlsEnv.cert);
  f.key = get(kClientTlsEnv.key);
  const std::string insecure = get(kClientTlsEnv.insecure);
  f.insecure = insecure == "1" || insecure == "true";
  return f;
}

absl::StatusOr<CoordinatorClient::Options> ClientOptionsFromEnv(const std::string& address,
                                                                const std::string& token) {
  CoordinatorClient::Options o;
  o.address = address;
  o.token = token;
  if (absl::Status s = LoadClientTls(ClientTlsFilesFromEnv(), kClientTlsEnv, &o); !s.ok()) {
    return s;
  }
  return o;
}

absl::StatusOr<std::unique_ptr<CoordinatorClient>> ClientFromEnv(const std::string& address,
                                                                 const std::string& token) {
  absl::StatusOr<CoordinatorClient::Options> options = ClientOptionsFromEnv(address, token);
  if (!options.ok()) return options.status();
  return CoordinatorClient::Create(*options);
}

}  // namespace shardline::client
