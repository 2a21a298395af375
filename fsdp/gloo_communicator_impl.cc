#include "fsdp/gloo_communicator_impl.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "fsdp/comm_args.h"
#include "fsdp/gloo_errors.h"

namespace shardline::fsdp {

GlooCommunicator::Impl::Impl(Options options, std::shared_ptr<gloo::transport::Device> device,
                             std::shared_ptr<gloo::rendezvous::Context> context)
    : options_(std::move(options)), device_(std::move(device)), context_(std::move(context)) {
  options_.store = nullptr;  // Only valid inside Create.
}

GlooCommunicator::Impl::~Impl() {
  // Closing barrier: a rank that tears down its pairs right after its last collective can
  // cut a peer off while that peer still reads the last messages (Gloo's TCP pair raises the
  // peer's EOF even when the data before it already arrived). Once this barrier completes,
  // every peer has finished every earlier collective; errors of the barrier itself are
  // expected at shutdown and ignored. Skipped when broken: a peer is gone anyway.
  bool broken;
  {
    absl::MutexLock lock(&mu_);
    broken = !broken_.ok();
  }
  if (!broken && options_.size > 1) {
    // Short: it only has to cover the tail of the last collective on the other ranks; a rank
    // that is still busy elsewhere has received everything already.
    const auto timeout = gloo_internal::ToChrono(std::min(options_.timeout, absl::Seconds(2)));
    Submit("close", absl::OkStatus(),
           [this, timeout](uint32_t tag) { gloo_internal::GlooBarrier(context_, tag, timeout); })
        ->Wait()
        .IgnoreError();
  }
  queue_.reset();  // Join the thread before the context goes.
}

void GlooCommunicator::Impl::Abandon() {
  absl::MutexLock lock(&mu_);
  if (broken_.ok()) {
    broken_ = absl::CancelledError(absl::StrCat(options_.name, ": abandoned by this rank"));
  }
}

std::unique_ptr<CommHandle> GlooCommunicator::Impl::Submit(absl::string_view op, absl::Status args,
                                                           std::function<void(uint32_t)> body) {
  if (!args.ok()) return std::make_unique<ReadyHandle>(std::move(args));
  const int64_t step = step_.load();
  std::string prefix = CommErrorPrefix(options_.name, op, step);
  return queue_->Enqueue([this, prefix = std::move(prefix), body = std::move(body)]() {
    {
      absl::MutexLock lock(&mu_);
      if (!broken_.ok()) {
        return absl::FailedPreconditionError(absl::StrCat(
            prefix, "communicator is broken by an earlier error: ", broken_.message()));
      }
    }
    try {
      body(next_tag_++);
      return absl::OkStatus();
    } catch (...) {
      absl::Status status = gloo_internal::StatusFromCurrentException(
          prefix, options_.timeout,
          DescribeGroupMembers(options_.global_ranks, options_.rank, options_.size));
      absl::MutexLock lock(&mu_);
      broken_ = status;
      return status;
    }
  });
}

}  // namespace shardline::fsdp
