#include "cli/session.h"

#include <iostream>

#include "cli/exit_codes.h"
#include "cli/target.h"
#include "client/client_tls.h"
#include "common/status_macros.h"

namespace shardline::cli {

using client::CoordinatorClient;

absl::StatusOr<std::unique_ptr<client::CoordinatorClient>> Session::Connect() {
  auto target = ResolveTarget(options_.connection);
  if (!target.ok()) return target.status();
  client::CoordinatorClient::Options o;
  o.address = target->address;
  o.token = target->token;
  o.timeout = options_.connection.timeout;
  RETURN_IF_ERROR(client::LoadClientTls(target->tls, client::kClientTlsFlags, &o));
  tls_ = !o.tls_root_certs.empty();
  return client::CoordinatorClient::Create(o);
}

int Session::Fail(const absl::Status& s) const {
  std::cerr << "shardctl: " << s.message() << "\n";
  if (s.code() == absl::StatusCode::kUnavailable) {
    std::cerr << "shardctl: is the coordinator running? (`shardctl cluster up` starts a local "
                 "one; --coordinator or $SHARDLINE_COORDINATOR name another)\n";
    if (!tls_) {
      std::cerr << "shardctl: if the coordinator serves TLS, pass --tls_ca=CA.pem (or tls_ca= "
                   "in the config file)\n";
    }
  }
  return ExitFor(s);
}

int Session::UsageError(const std::string& usage) const {
  std::cerr << "shardctl: " << usage << "\n";
  return kUsage;
}

}  // namespace shardline::cli
