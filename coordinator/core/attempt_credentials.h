// AttemptCredentials: the credentials of the job attempts now running, each bound to its job and
// attempt. An attempt's credential is its rendezvous secret (32 bytes from getrandom, hex; a new
// one per attempt, persisted in the job's record so a restarted coordinator re-adds it); its
// trainers present it as their bearer token, and it may only report progress and checkpoints for
// that job attempt and use that attempt's rendezvous namespace. The core adds a credential when
// an attempt starts (or is restored) and removes it when the attempt ends, so a late or forged
// report of an ended attempt finds nothing.
//
// Only SHA-256 digests are kept as keys: a lookup compares digests, never the secrets.
//
// Thread safety: every method may be called from any thread (own mutex).
#ifndef SHARDLINE_COORDINATOR_CORE_ATTEMPT_CREDENTIALS_H_
#define SHARDLINE_COORDINATOR_CORE_ATTEMPT_CREDENTIALS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace shardline::coordinator {

// The job attempt an attempt credential belongs to.
struct AttemptIdentity {
  std::string job_id;
  int32_t attempt = 0;
  std::string rendezvous_namespace;  // "<job>/<attempt>"
};

class AttemptCredentials {
 public:
  // Binds `credential` to `id` (replacing any credential of the same namespace).
  void Add(absl::string_view credential, const AttemptIdentity& id);
  // Forgets the credential of namespace `ns` (no-op when none).
  void Remove(absl::string_view ns);
  // The attempt `credential` belongs to; nullopt for an unknown or ended attempt's.
  std::optional<AttemptIdentity> Find(absl::string_view credential) const;

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, AttemptIdentity> by_digest_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::string> digest_by_ns_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shardline::coordinator

#endif  // SHARDLINE_COORDINATOR_CORE_ATTEMPT_CREDENTIALS_H_
