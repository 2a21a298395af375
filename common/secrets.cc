#include "common/secrets.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <sys/random.h>

#include <cerrno>
#include <random>

#include "absl/strings/escaping.h"

namespace shardline {

std::string RandomSecret() {
  std::string bytes(32, '\0');
  size_t got = 0;
  while (got < bytes.size()) {  // the kernel's CSPRNG; blocks only before it is seeded at boot
    const ssize_t n = getrandom(bytes.data() + got, bytes.size() - got, 0);
    if (n > 0) {
      got += static_cast<size_t>(n);
    } else if (n < 0 && errno != EINTR) {
      std::random_device rd;  // getrandom missing (pre-3.17 kernel): the library's source
      for (; got < bytes.size(); ++got) bytes[got] = static_cast<char>(rd() & 0xff);
    }
  }
  return absl::BytesToHexString(bytes);
}

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

}  // namespace shardline
