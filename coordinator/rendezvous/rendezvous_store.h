// RendezvousStore: key-value namespaces, one per job attempt ("<job>/<attempt>"), through which
// the trainers of that attempt bootstrap their communicators. Each namespace has a secret; every
// read and write must present it.
//
// Errors: NOT_FOUND for an unknown (or closed) namespace, PERMISSION_DENIED for a wrong secret,
// DEADLINE_EXCEEDED naming the missing keys when Get times out, ABORTED when the namespace is
// closed while Get waits, RESOURCE_EXHAUSTED past the size limits, INVALID_ARGUMENT for an empty
// key.
//
// Persistence: with a Journal, every accepted Set and every Close (and re-Open) of a namespace
// is reported to it under the store's lock, so its writes come in the order the store applied
// them; the coordinator queues them on its StateWriter and reloads them with Restore after a
// restart (nobody waits for them to be durable).
//
// Thread safety: every method may be called from any thread; Get blocks only its caller.
#ifndef SHARDLINE_COORDINATOR_RENDEZVOUS_RENDEZVOUS_STORE_H_
#define SHARDLINE_COORDINATOR_RENDEZVOUS_RENDEZVOUS_STORE_H_

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
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
    // Values one Get returns together (coordinator flag --rendezvous_max_response_bytes). A
    // request names keys, a response copies their values: without this bound (and with keys
    // repeated) a 10 KB request could make the coordinator build gigabytes.
    size_t max_response_bytes = 8 << 20;
  };
  // Delegates (not "= default"): clang cannot default-construct Limits, whose members have
  // initializers, inside the class that encloses it (the fuzz build, tools/fuzz.sh, uses clang).
  // Told of every change to keep (see the file comment); called with the store's lock held, so
  // it must not call back into the store.
  struct Journal {
    std::function<void(const std::string& ns, const std::string& key, const std::string& value)>
        put;
    std::function<void(const std::string& ns)> drop;  // the namespace and its values are gone
  };
  RendezvousStore() : RendezvousStore(Limits()) {}
  explicit RendezvousStore(Limits limits, Journal journal = {})
      : limits_(limits), journal_(std::move(journal)) {}

  // Creates (or re-creates, empty) namespace `ns` readable with `secret`.
  void Open(absl::string_view ns, absl::string_view secret);
  // Drops `ns` and its keys; waiting Gets return ABORTED.
  void Close(absl::string_view ns);

  absl::Status Set(absl::string_view ns, absl::string_view secret, absl::string_view key,
                   absl::string_view value);
  // A value reloaded after a restart into the open namespace `ns`: Set without the secret and
  // without telling the journal (it holds the value already). The limits apply (a coordinator
  // restarted with smaller ones refuses what no longer fits): RESOURCE_EXHAUSTED, NOT_FOUND.
  absl::Status Restore(absl::string_view ns, absl::string_view key, absl::string_view value);
  // Whether `ns` is open.
  bool IsOpen(absl::string_view ns) const;

  // Values of `keys` in order, waiting up to `timeout` until all exist (0: no wait). A key named
  // twice is INVALID_ARGUMENT; values adding up to more than max_response_bytes are
  // RESOURCE_EXHAUSTED (both checked before anything is copied).
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

  // Checks the limits and stores the value into the found namespace.
  absl::Status SetLocked(absl::string_view ns, Namespace& space, absl::string_view key,
                         absl::string_view value) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckKeyAndValue(absl::string_view key, absl::string_view value) const;

  const Limits limits_;
  const Journal journal_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<Namespace>, std::less<>> namespaces_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shardline::coordinator

#endif  // SHARDLINE_COORDINATOR_RENDEZVOUS_RENDEZVOUS_STORE_H_
