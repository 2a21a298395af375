// Client TLS settings: the one place that turns a client's TLS flags (worker, shardctl) or
// environment (trainers, given by their worker daemon) into CoordinatorClient::Options.
//
//   --tls_ca=FILE     PEM CA certificate(s) to trust: turns TLS on
//   --tls_cert=FILE   PEM client certificate (chain) for mutual TLS (worker daemons)
//   --tls_key=FILE    PEM private key of --tls_cert
//   --insecure        allow sending a token in clear text to a non-loopback address
//
// The settings hold file PATHS; LoadClientTls reads the files (clear errors naming the setting
// and the file). Without a CA the channel is plain text, which CoordinatorClient::Create refuses
// for a token and a non-loopback address unless `insecure`.
//
// Thread safety: pure functions (LoadClientTls reads files, nothing else).
#ifndef SHARDLINE_CLIENT_CLIENT_TLS_H_
#define SHARDLINE_CLIENT_CLIENT_TLS_H_

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/client.h"

namespace shardline::client {

struct ClientTlsFiles {
  std::string ca;    // path; empty: no TLS
  std::string cert;  // path; empty: no client certificate
  std::string key;   // path of cert's private key
  bool insecure = false;
};

// How each setting is spelled where it came from, for error messages.
struct ClientTlsNames {
  const char* ca;
  const char* cert;
  const char* key;
  const char* insecure;
};
inline constexpr ClientTlsNames kClientTlsFlags = {"--tls_ca", "--tls_cert", "--tls_key",
                                                   "--insecure"};
// The environment a worker daemon gives its trainers (paths, never PEM contents).
inline constexpr ClientTlsNames kClientTlsEnv = {"SHARDLINE_TLS_CA", "SHARDLINE_TLS_CERT",
                                                 "SHARDLINE_TLS_KEY", "SHARDLINE_INSECURE"};

// Reads the files into options->tls_* and sets options->insecure.
// Errors: INVALID_ARGUMENT for a cert without its key (or the reverse), or a client certificate
// without a CA; NOT_FOUND naming the setting and the file when one cannot be read.
absl::Status LoadClientTls(const ClientTlsFiles& files, const ClientTlsNames& names,
                           CoordinatorClient::Options* options);

// The environment entries (kClientTlsEnv) that hand `files` to a child process; every entry is
// present (empty when unset) so that nothing inherited overrides them. Relative paths are made
// absolute against this process's working directory: the child (a trainer, which the worker
// daemon starts in the rank's own directory) may run elsewhere.
std::map<std::string, std::string> ClientTlsEnv(const ClientTlsFiles& files);

// The settings read back from that environment (`getenv`: std::getenv when null).
ClientTlsFiles ClientTlsFilesFromEnv(
    const std::function<const char*(const char*)>& getenv = nullptr);

// Options for `address` and `token` with the TLS settings of `files` read from the environment
// (ClientTlsFilesFromEnv, kClientTlsEnv names): what a trainer rank connects with.
absl::StatusOr<CoordinatorClient::Options> ClientOptionsFromEnv(const std::string& address,
                                                                const std::string& token);
// A client with those options: what each of a trainer rank's coordinator connections uses
// (rendezvous store, checkpoint reports, step votes). Errors: ClientOptionsFromEnv's, Create's.
absl::StatusOr<std::unique_ptr<CoordinatorClient>> ClientFromEnv(const std::string& address,
                                                                 const std::string& token);

}  // namespace shardline::client

#endif  // SHARDLINE_CLIENT_CLIENT_TLS_H_
