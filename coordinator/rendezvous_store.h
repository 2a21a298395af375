// RendezvousStore: key-value namespaces, one per job attempt ("<job>/<attempt>"), through which
// the trainers of that attempt bootstrap their communicators. Each namespace has a secret; every
// read and write must present it.
//
// Errors: NOT_FOUND for an unknown (or closed) namespace, PERMISSION_DENIED for a wrong secret,
// DEADLINE_EXCEEDED naming the missing keys when Get times out, ABORTED when the namespace is
// closed while Get waits, RESOURCE_EXHAUSTED past the size limits, INVALID_ARGUMENT for an empty
// key.
//
// Thread safety: every method may be called from any thread; Get blocks only its caller.
#ifndef SHARDLINE_COORDINATOR_RENDEZVOUS_STORE_H_
#define SHARDLINE_COORDINATOR_RENDEZVOUS_STORE_H_

#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace shardline::coordinator {

class RendezvousStore {
 public:
  struct Limits {
    size_t max_value_bytes = 1 << 20;
    size_t max_keys_per_namespace = 65536;
    // Keys are short names ("shard[0]/rank_3"); a long one only costs memory (and messages that
    // name missing keys).
    size_t max_key_bytes = 4096;
    // Keys plus values held by one namespace (coordinator flag
    // --rendezvous_max_bytes_per_namespace). A few KiB per rank per communicator suffices; without
    // this bound one job could hold max_keys x max_value_bytes (64 GiB) of coordinator memory.
    size_t max_bytes_per_namespace = 64 << 20;
  };
  // Delegates (not "= default"): clang cannot default-construct Limits, whose members have
  // initializers, inside the class that encloses it (the fuzz build, tools/fuzz.sh, uses clang).
  RendezvousStore() : RendezvousStore(Limits()) {}
  explicit RendezvousStore(Limits limits) : limits_(limits) {}

  // Creates (or re-creates, empty) namespace `ns` readable with `secret`.
  void Open(absl::string_view ns, absl::string_view secret);
  // Drops `ns` and its keys; waiting Gets return ABORTED.
  void Close(absl::string_view ns);

  absl::Status Set(absl::string_view ns, absl::string_view secret, absl::string_view key,
                   absl::string_view value);

  // Values of `keys` in order, waiting up to `timeout` until all exist (0: no wait).
  // `reported_wait`, when set, is the wait named in the DEADLINE_EXCEEDED message (a caller
  // that polls with zero timeouts reports how long it waited in all).
  absl::StatusOr<std::vector<std::string>> Get(
      absl::string_view ns, absl::string_view secret, const std::vector<std::string>& keys,
      absl::Duration timeout, absl::Duration reported_wait = absl::InfiniteDuration());

  size_t namespace_count() const;

 private:
  struct Namespace {
    std::string secret;
    std::map<std::string, std::string> values;
    size_t bytes = 0;  // Keys plus values in `values`.
    bool closed = false;
  };
  // Finds `ns` and checks `secret`.
  absl::StatusOr<std::shared_ptr<Namespace>> Find(absl::string_view ns,
                                                  absl::string_view secret) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Limits limits_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<Namespace>, std::less<>> namespaces_ ABSL_GUARDED_BY(mu_);
};

// 32 random bytes (getrandom(2), the kernel's CSPRNG), hex encoded: attempt and worker
// credentials.
std::string RandomSecret();

}  // namespace shardline::coordinator

#endif  // SHARDLINE_COORDINATOR_RENDEZVOUS_STORE_H_
