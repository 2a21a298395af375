#include "coordinator/credentials.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include "absl/strings/escaping.h"

namespace shardline::coordinator {

std::string Sha256Hex(absl::string_view data) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), digest);
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(digest), sizeof(digest)));
}

bool DigestEquals(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;  // digests have one length; this leaks nothing
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace shardline::coordinator
