// Where shardctl finds the coordinator, the user token and the TLS settings.
//
// The coordinator address: --coordinator, else $SHARDLINE_COORDINATOR, else the config file
// (--config, default ~/.shardline/config, lines "coordinator=HOST:PORT" and "token=..."), else
// the local cluster started by `cluster up` (<state_dir>/cluster.json). The user token likewise:
// --token_file, --token, $SHARDLINE_TOKEN, the config file, the local cluster. TLS: --tls_ca,
// --tls_cert, --tls_key, --insecure, else the config file's tls_ca=, tls_cert=, tls_key=,
// insecure=true. A config file or cluster.json holding a token must be mode 0600.
//
// Thread safety: reads the environment and files; no shared state.
#ifndef SHARDLINE_CLI_TARGET_H_
#define SHARDLINE_CLI_TARGET_H_

#include <string>

#include "absl/status/statusor.h"
#include "cli/options.h"
#include "client/client_tls.h"

namespace shardline::cli {

struct Target {
  std::string address;
  std::string token;
  client::ClientTlsFiles tls;
};

// The first source above that names each setting wins. Errors: INVALID_ARGUMENT for both
// --token and --token_file; the token file's or config file's error when one holding a token is
// unreadable or readable by others; a cluster.json error other than NOT_FOUND; NOT_FOUND when no
// source names a coordinator.
absl::StatusOr<Target> ResolveTarget(const ConnectionOptions& options);

}  // namespace shardline::cli

#endif  // SHARDLINE_CLI_TARGET_H_
