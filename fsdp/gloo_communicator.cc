// GlooCommunicator's public methods: Create validates the options and connects
// (gloo_rendezvous.h); each collective checks its arguments (comm_args.h) and submits the Gloo
// call (gloo_collectives.h, gloo_reduce_scatter_cache.h) to the communication thread of its
// Impl (gloo_communicator_impl.h), which turns Gloo's exceptions into statuses.
#include "fsdp/gloo_communicator.h"

#include <exception>
#include <string>
#include <utility>

#include <ATen/core/Tensor.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "fsdp/comm_args.h"
#include "fsdp/gloo_collectives.h"
#include "fsdp/gloo_communicator_impl.h"
#include "fsdp/gloo_rendezvous.h"

namespace shardline::fsdp {

absl::StatusOr<std::unique_ptr<GlooCommunicator>> GlooCommunicator::Create(const Options& options) {
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size) {
    return absl::InvalidArgumentError(absl::StrCat("group ", options.name, ": rank ", options.rank,
                                                   " is outside a group of size ", options.size));
  }
  if (!options.global_ranks.empty() &&
      static_cast<int>(options.global_ranks.size()) != options.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("group ", options.name, ": ", options.global_ranks.size(),
                     " global ranks for a group of size ", options.size));
  }
  if (options.store == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("group ", options.name, ": no store"));
  }
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("group ", options.name, ": timeout ",
                                                   absl::FormatDuration(options.timeout),
                                                   " is not positive"));
  }
  absl::StatusOr<gloo_internal::GlooMesh> mesh = gloo_internal::ConnectGlooMesh(options);
  if (!mesh.ok()) return mesh.status();
  // Impl starts the communication thread: a failure to start it (std::system_error) is a
  // status here, not an exception through the caller.
  try {
    return std::unique_ptr<GlooCommunicator>(new GlooCommunicator(
        std::make_unique<Impl>(options, std::move(mesh->device), std::move(mesh->context))));
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrCat("group ", options.name, ": start the communication thread: ", e.what()));
  }
}

GlooCommunicator::GlooCommunicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GlooCommunicator::~GlooCommunicator() = default;

int GlooCommunicator::rank() const { return impl_->options().rank; }
int GlooCommunicator::size() const { return impl_->options().size; }
const std::string& GlooCommunicator::name() const { return impl_->options().name; }
void GlooCommunicator::set_step(int64_t step) { impl_->set_step(step); }

void GlooCommunicator::Abandon() { impl_->Abandon(); }

std::unique_ptr<CommHandle> GlooCommunicator::AllGatherAsync(const at::Tensor& in,
                                                             const at::Tensor& out) {
  Impl* impl = impl_.get();
  return impl->Submit("all_gather", CheckAllGatherArgs(name(), size(), at::kCPU, in, out),
                      [impl, in, out](uint32_t tag) {
                        if (out.numel() == 0) return;
                        gloo_internal::GlooAllGather(impl->context(), in, out, tag,
                                                     impl->timeout());
                      });
}

absl::Status GlooCommunicator::AllGather(const at::Tensor& in, const at::Tensor& out) {
  return AllGatherAsync(in, out)->Wait();
}

std::unique_ptr<CommHandle> GlooCommunicator::ReduceScatterAsync(const at::Tensor& in,
                                                                 const at::Tensor& out,
                                                                 ReduceOp op) {
  return SubmitReduceScatter(in, out, op, /*consume_input=*/false);
}

std::unique_ptr<CommHandle> GlooCommunicator::ReduceScatterConsumingAsync(const at::Tensor& in,
                                                                          const at::Tensor& out,
                                                                          ReduceOp op) {
  return SubmitReduceScatter(in, out, op, /*consume_input=*/true);
}

std::unique_ptr<CommHandle> GlooCommunicator::SubmitReduceScatter(const at::Tensor& in,
                                                                  const at::Tensor& out,
                                                                  ReduceOp op, bool consume_input) {
  Impl* impl = impl_.get();
  return impl->Submit("reduce_scatter", CheckReduceScatterArgs(name(), size(), at::kCPU, in, out),
                      [impl, in, out, op, consume_input](uint32_t tag) {
                        if (out.numel() == 0) return;
                        impl->reduce_scatter().Run(impl->context(), in, out, op, consume_input, tag,
                                                   impl->timeout());
                      });
}

absl::Status GlooCommunicator::ReduceScatter(const at::Tensor& in, const at::Tensor& out,
                                             ReduceOp op) {
  return ReduceScatterAsync(in, out, op)->Wait();
}

std::unique_ptr<CommHandle> GlooCommunicator::AllReduceAsync(const at::Tensor& t, ReduceOp op) {
  Impl* impl = impl_.get();
  return impl->Submit("all_reduce", CheckAllReduceArgs(name(), at::kCPU, t, op == ReduceOp::kAvg),
                      [impl, t, op](uint32_t tag) {
                        if (t.numel() == 0) return;
                        gloo_internal::GlooAllReduce(impl->context(), t, op, tag, impl->timeout());
                      });
}

absl::Status GlooCommunicator::AllReduce(const at::Tensor& t, ReduceOp op) {
  return AllReduceAsync(t, op)->Wait();
}

absl::Status GlooCommunicator::Broadcast(const at::Tensor& t, int root) {
  Impl* impl = impl_.get();
  return impl
      ->Submit("broadcast", CheckBroadcastArgs(name(), size(), at::kCPU, t, root),
               [impl, t, root](uint32_t tag) {
                 if (t.numel() == 0) return;
                 gloo_internal::GlooBroadcast(impl->context(), t, root, tag, impl->timeout());
               })
      ->Wait();
}

absl::Status GlooCommunicator::Barrier() {
  Impl* impl = impl_.get();
  return impl
      ->Submit("barrier", absl::OkStatus(),
               [impl](uint32_t tag) {
                 gloo_internal::GlooBarrier(impl->context(), tag, impl->timeout());
               })
      ->Wait();
}

}  // namespace shardline::fsdp
