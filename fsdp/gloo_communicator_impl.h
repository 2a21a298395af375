// GlooCommunicator::Impl: the state behind one GlooCommunicator, that is its connected Gloo
// context, its communication thread (CommQueue), its broken flag and its reduce-scatter
// instances. Implementation of GlooCommunicator, not for other callers (a private header of
// //fsdp:gloo_communicator); gloo_communicator.cc's public methods submit collectives to it.
//
// Thread safety: Submit, set_step and Abandon may be called from any thread; the submitted
// bodies, and so reduce_scatter(), run on the communication thread only.
#ifndef SHARDLINE_FSDP_GLOO_COMMUNICATOR_IMPL_H_
#define SHARDLINE_FSDP_GLOO_COMMUNICATOR_IMPL_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "fsdp/comm_queue.h"
#include "fsdp/gloo_collectives.h"
#include "fsdp/gloo_communicator.h"
#include "fsdp/gloo_reduce_scatter_cache.h"
#include "gloo/rendezvous/context.h"
#include "gloo/transport/device.h"

namespace shardline::fsdp {

class GlooCommunicator::Impl {
 public:
  Impl(Options options, std::shared_ptr<gloo::transport::Device> device,
       std::shared_ptr<gloo::rendezvous::Context> context);
  // Runs the queued collectives, then the closing barrier (see the .cc).
  ~Impl();

  const Options& options() const { return options_; }
  void set_step(int64_t step) { step_.store(step); }
  // Broken on purpose: no closing barrier at teardown, no collective after it.
  void Abandon();

  // Runs `body(tag)` on the communication thread unless `args` is an error; a Gloo exception
  // from `body` becomes the returned status and breaks the communicator.
  std::unique_ptr<CommHandle> Submit(absl::string_view op, absl::Status args,
                                     std::function<void(uint32_t)> body);

  std::chrono::milliseconds timeout() const { return gloo_internal::ToChrono(options_.timeout); }
  const std::shared_ptr<gloo::rendezvous::Context>& context() const { return context_; }
  // Communication thread only.
  gloo_internal::ReduceScatterCache& reduce_scatter() { return reduce_scatter_; }

 private:
  Options options_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::rendezvous::Context> context_;
  std::atomic<int64_t> step_{0};
  uint32_t next_tag_ = 0;  // Used on the communication thread only.
  absl::Mutex mu_;
  absl::Status broken_ ABSL_GUARDED_BY(mu_);
  gloo_internal::ReduceScatterCache reduce_scatter_{options_.reduce_scatter_cache_entries};
  std::unique_ptr<CommQueue> queue_ = std::make_unique<CommQueue>();
};

}  // namespace shardline::fsdp

#endif  // SHARDLINE_FSDP_GLOO_COMMUNICATOR_IMPL_H_
