// Session: one shardctl run — its options, its connection to the coordinator, and how its
// errors reach the user (a message on stderr and an exit code, exit_codes.h).
//
// Thread safety: not thread-safe; one per shardctl invocation.
#ifndef SHARDLINE_CLI_SESSION_H_
#define SHARDLINE_CLI_SESSION_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cli/options.h"
#include "client/client.h"

namespace shardline::cli {

class Session {
 public:
  explicit Session(ShardctlOptions options) : options_(std::move(options)) {}

  const ShardctlOptions& options() const { return options_; }

  // A client for the coordinator that ResolveTarget (target.h) names, with the TLS settings it
  // found. Errors: ResolveTarget's, client::LoadClientTls's, client::CoordinatorClient::Create's.
  absl::StatusOr<std::unique_ptr<client::CoordinatorClient>> Connect();

  // Prints "shardctl: <message>" (with hints when the coordinator is unavailable) and returns
  // the exit code of `s` (ExitFor).
  int Fail(const absl::Status& s) const;

  // Prints "shardctl: <usage>" and returns kUsage.
  int UsageError(const std::string& usage) const;

 private:
  ShardctlOptions options_;
  bool tls_ = false;  // whether Connect() configured TLS, for the hint on an unreachable one
};

}  // namespace shardline::cli

#endif  // SHARDLINE_CLI_SESSION_H_
