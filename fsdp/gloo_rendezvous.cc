#include "fsdp/gloo_rendezvous.h"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "fsdp/comm_args.h"
#include "fsdp/gloo_collectives.h"
#include "fsdp/gloo_errors.h"
#include "fsdp/kv_store.h"
#include "gloo/rendezvous/store.h"
#include "gloo/transport/tcp/device.h"

namespace shardline::fsdp::gloo_internal {
namespace {

// Lets gloo::rendezvous::Context::connectFullMesh publish and fetch pair addresses in our
// KvStore. Gloo calls wait() before get(), so get() needs no long timeout of its own.
class StoreAdapter : public gloo::rendezvous::Store {
 public:
  StoreAdapter(KvStore* store, absl::Duration timeout) : store_(store), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    absl::Status s = store_->Set(key, absl::string_view(data.data(), data.size()));
    if (!s.ok()) throw StoreError(s);
  }

  std::vector<char> get(const std::string& key) override {
    absl::StatusOr<std::vector<std::string>> values = store_->Get({key}, timeout_);
    if (!values.ok()) throw StoreError(values.status());
    const std::string& v = (*values)[0];
    return std::vector<char>(v.begin(), v.end());
  }

  void wait(const std::vector<std::string>& keys) override { Wait(keys, timeout_); }

  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    Wait(keys, std::min(timeout_, absl::FromChrono(timeout)));
  }

 private:
  void Wait(const std::vector<std::string>& keys, absl::Duration timeout) {
    absl::StatusOr<std::vector<std::string>> values = store_->Get(keys, timeout);
    if (!values.ok()) throw StoreError(values.status());
  }

  KvStore* const store_;
  const absl::Duration timeout_;
};

// Gloo's TCP pairs write without MSG_NOSIGNAL, so a write to a peer that died raises SIGPIPE,
// whose default action kills this process before Gloo can report the error (Python, and so
// PyTorch, ignores SIGPIPE at start-up, which hides this there). Ignore it unless the program
// installed its own handler.
void IgnoreSigpipeOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction current {};
    if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
      signal(SIGPIPE, SIG_IGN);
    }
  });
}

}  // namespace

absl::StatusOr<GlooMesh> ConnectGlooMesh(const GlooCommunicator::Options& options) {
  const std::string prefix = CommErrorPrefix(options.name, "connect", 0);
  IgnoreSigpipeOnce();
  try {
    gloo::transport::tcp::attr attr;
    if (!options.interface.empty()) {
      attr.iface = options.interface;
    } else {
      attr.hostname = options.address;
    }
    GlooMesh mesh;
    mesh.device = gloo::transport::tcp::CreateDevice(attr);
    mesh.context = std::make_shared<gloo::rendezvous::Context>(options.rank, options.size);
    // Set before connecting: each pair copies the context's timeout when it is created, and
    // the pairs' timeout is what bounds the halving-doubling reduce-scatter.
    mesh.context->setTimeout(ToChrono(options.timeout));
    StoreAdapter store(options.store, options.timeout);
    mesh.context->connectFullMesh(store, mesh.device);
    return mesh;
  } catch (...) {
    return StatusFromCurrentException(
        prefix, options.timeout,
        DescribeGroupMembers(options.global_ranks, options.rank, options.size));
  }
}

}  // namespace shardline::fsdp::gloo_internal
