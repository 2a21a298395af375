// Helpers for the secrets the coordinator issues (worker and attempt credentials, dashboard
// sessions) and the tokens it checks: random secrets from the kernel's CSPRNG, SHA-256 digests
// (OpenSSL's libcrypto), so only digests of issued secrets need to be kept, and a constant-time
// comparison of digests.
#ifndef SHARDLINE_COMMON_SECRETS_H_
#define SHARDLINE_COMMON_SECRETS_H_

#include <string>

#include "absl/strings/string_view.h"

namespace shardline {

// 32 random bytes (getrandom(2), the kernel's CSPRNG), hex encoded: attempt and worker
// credentials, dashboard session ids.
std::string RandomSecret();

// Lower-case hex SHA-256 of `data` (64 characters).
std::string Sha256Hex(absl::string_view data);

// True when `a` and `b` are equal; the time taken does not depend on where they differ.
bool DigestEquals(absl::string_view a, absl::string_view b);

}  // namespace shardline

#endif  // SHARDLINE_COMMON_SECRETS_H_
