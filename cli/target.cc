#include "cli/target.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "cli/local_cluster.h"
#include "common/secret_file.h"
#include "common/status_macros.h"

namespace shardline::cli {
namespace {

// "true"/"1" (config file booleans).
bool IsTrue(absl::string_view v) { return v == "true" || v == "1" || v == "yes"; }

}  // namespace

absl::StatusOr<Target> ResolveTarget(const ConnectionOptions& options) {
  Target t{options.coordinator, options.token};
  if (!options.token_file.empty()) {
    if (!t.token.empty()) {
      return absl::InvalidArgumentError("give --token or --token_file, not both");
    }
    auto token = ReadTokenFile(options.token_file, "--token_file");
    if (!token.ok()) return token.status();
    t.token = *token;
  }
  t.tls = options.tls;
  auto fill = [&t](const std::string& address, const std::string& token) {
    if (t.address.empty()) t.address = address;
    if (t.token.empty()) t.token = token;
  };
  const char* env_addr = std::getenv("SHARDLINE_COORDINATOR");
  const char* env_token = std::getenv("SHARDLINE_TOKEN");
  fill(env_addr ? env_addr : "", env_token ? env_token : "");
  std::string config = options.config;
  if (config.empty() && std::getenv("HOME") != nullptr) {
    config = std::string(std::getenv("HOME")) + "/.shardline/config";
  }
  if (std::ifstream in(config); in) {
    std::string line, address, token;
    client::ClientTlsFiles tls;
    while (std::getline(in, line)) {
      absl::string_view v = line;
      auto value = [&v] { return std::string(absl::StripAsciiWhitespace(v)); };
      if (absl::ConsumePrefix(&v, "coordinator=")) address = value();
      if (absl::ConsumePrefix(&v, "token=")) token = value();
      if (absl::ConsumePrefix(&v, "tls_ca=")) tls.ca = value();
      if (absl::ConsumePrefix(&v, "tls_cert=")) tls.cert = value();
      if (absl::ConsumePrefix(&v, "tls_key=")) tls.key = value();
      if (absl::ConsumePrefix(&v, "insecure=")) tls.insecure = IsTrue(value());
    }
    if (!token.empty()) {
      RETURN_IF_ERROR(CheckOwnerOnlyFile(config, "config file"));  // it holds the token
    }
    fill(address, token);
    if (t.tls.ca.empty()) t.tls.ca = tls.ca;
    if (t.tls.cert.empty()) t.tls.cert = tls.cert;
    if (t.tls.key.empty()) t.tls.key = tls.key;
    t.tls.insecure = t.tls.insecure || tls.insecure;
  }
  if (t.address.empty() || t.token.empty()) {
    auto local = ReadClusterInfo(options.state_dir);
    if (local.ok()) {
      fill(local->coordinator_address, local->token);
    } else if (local.status().code() != absl::StatusCode::kNotFound) {
      return local.status();  // e.g. a cluster.json others can read: say so, do not skip it
    }
  }
  if (t.address.empty()) {
    // The local cluster is found through a relative --state_dir (.cluster): from another
    // directory a running cluster looks absent, so name the directory looked in.
    std::error_code ec;
    const std::string looked = std::filesystem::absolute(options.state_dir, ec).string();
    return absl::NotFoundError(absl::StrCat(
        "no coordinator: pass --coordinator=HOST:PORT, set $SHARDLINE_COORDINATOR, or start a "
        "local cluster with `shardctl cluster up` (no local cluster in ",
        ec ? options.state_dir : looked,
        ": one started elsewhere is found from that directory, or with --state_dir=DIR/.cluster)"));
  }
  return t;
}

}  // namespace shardline::cli
