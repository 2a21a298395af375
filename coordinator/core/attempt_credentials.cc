#include "coordinator/core/attempt_credentials.h"

#include "common/secrets.h"

namespace shardline::coordinator {

void AttemptCredentials::Add(absl::string_view credential, const AttemptIdentity& id) {
  const std::string digest = Sha256Hex(credential);
  absl::MutexLock lock(&mu_);
  if (auto old = digest_by_ns_.find(id.rendezvous_namespace); old != digest_by_ns_.end()) {
    by_digest_.erase(old->second);
  }
  digest_by_ns_[id.rendezvous_namespace] = digest;
  by_digest_[digest] = id;
}

void AttemptCredentials::Remove(absl::string_view ns) {
  absl::MutexLock lock(&mu_);
  auto it = digest_by_ns_.find(ns);
  if (it == digest_by_ns_.end()) return;
  by_digest_.erase(it->second);
  digest_by_ns_.erase(it);
}

std::optional<AttemptIdentity> AttemptCredentials::Find(absl::string_view credential) const {
  if (credential.empty()) return std::nullopt;
  const std::string digest = Sha256Hex(credential);
  absl::MutexLock lock(&mu_);
  auto it = by_digest_.find(digest);
  if (it == by_digest_.end()) return std::nullopt;
  return it->second;
}

}  // namespace shardline::coordinator
