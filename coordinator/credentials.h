// Helpers for the secrets the coordinator issues (worker and attempt credentials) and the tokens
// it checks: SHA-256 digests (OpenSSL's libcrypto), so only digests of issued secrets need to be
// kept, and a constant-time comparison of digests.
#ifndef SHARDLINE_COORDINATOR_CREDENTIALS_H_
#define SHARDLINE_COORDINATOR_CREDENTIALS_H_

#include <string>

#include "absl/strings/string_view.h"

namespace shardline::coordinator {

// Lower-case hex SHA-256 of `data` (64 characters).
std::string Sha256Hex(absl::string_view data);

// True when `a` and `b` are equal; the time taken does not depend on where they differ.
bool DigestEquals(absl::string_view a, absl::string_view b);

}  // namespace shardline::coordinator

#endif  // SHARDLINE_COORDINATOR_CREDENTIALS_H_
