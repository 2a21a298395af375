#include "fsdp/gloo_reduce_scatter_cache.h"

#include <utility>
#include <vector>

#include <ATen/ops/empty.h>

#include "fsdp/gloo_collectives.h"
#include "fsdp/gloo_recursive_halving.h"
#include "gloo/context.h"
#include "gloo/reduce_scatter.h"
#include "gloo/transport/buffer.h"

namespace shardline::fsdp::gloo_internal {
namespace {

// Gloo's halving-doubling reduce-scatter, plus the one thing its run() leaves out: waiting
// until every send it issued has left our memory. run() returns once this rank has its own
// result, but some sends (from a smaller binary block to the larger one when the group size is
// not a power of two) are never acknowledged, so they may still be in flight; `data` is
// freed right after, and a rank that then tears down its pairs cuts its peers off mid-receive.
// The conditions below mirror the ones under which run() sends on each buffer.
template <typename T>
class ReduceScatterAndFlush : public gloo::ReduceScatterHalvingDoubling<T> {
  using Base = gloo::ReduceScatterHalvingDoubling<T>;

 public:
  using Base::Base;

  void RunAndFlush() {
    this->run();
    if (this->contextSize_ == 1) return;
    const int my_rank = this->context_->rank;
    for (uint32_t i = 0; i < this->stepsWithinBlock_; ++i) {
      if (this->sendOffsets_[i] < static_cast<size_t>(this->count_)) {
        this->sendDataBufs_[i]->waitSend();
      }
      this->sendNotificationBufs_[i]->waitSend();
    }
    const size_t total = this->stepsWithinBlock_ > 0
                             ? this->recvCounts_[this->stepsWithinBlock_ - 1]
                             : static_cast<size_t>(this->count_);
    if (this->nextLargerBlockSize_ != 0 && total != 0) {
      for (size_t i = 0; i < this->largerBlockSendDataBufs_.size(); ++i) {
        if (this->sendCountToLargerBlock_ * i < total) {
          this->largerBlockSendDataBufs_[i]->waitSend();
        }
      }
    }
    for (auto& buf : this->distSendDataBufs_) buf->waitSend();
    size_t notify = this->stepsWithinBlock_;
    for (const auto& dist : this->distMapForRecv_) {
      if (dist.rank != my_rank) this->sendNotificationBufs_[notify++]->waitSend();
    }
  }
};

}  // namespace

void ReduceScatterCache::Run(const std::shared_ptr<gloo::Context>& context, const at::Tensor& in,
                             const at::Tensor& out, ReduceOp op, bool consume_input, uint32_t tag,
                             std::chrono::milliseconds timeout) {
  const at::ScalarType wide = in.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  const int size = context->size;
  const int64_t count = in.numel();
  const int64_t n = out.numel();
  Entry& entry = Find(context, wide, count, n, tag, timeout);
  at::Tensor result;  // [n] in `wide`: this rank's summed chunk.
  if (entry.halving != nullptr) {
    at::Tensor data = in.reshape({-1});
    if (!consume_input || in.scalar_type() != wide) {
      data = Buffer(&work_, count, wide);
      data.copy_(in.reshape({-1}));
    }
    result = out.scalar_type() == wide ? out.view({-1}) : Buffer(&result_, n, wide);
    entry.halving(data.data_ptr(), result.data_ptr());
  } else {
    entry.work.copy_(in.reshape({-1}));
    entry.gloo();
    // With a group size that is not a power of two, the smaller binary block sends its
    // partial sums to the larger one without an acknowledgement, so a fast rank could start
    // the next run of this instance and overwrite a receive buffer its peer has not reduced
    // yet (seen in tests as wrong sums). A barrier closes each run.
    GlooBarrier(context, tag, timeout);
    result = entry.work.narrow(0, 0, n);
  }
  if (op == ReduceOp::kAvg) result.div_(size);
  if (result.data_ptr() != out.data_ptr()) out.view({-1}).copy_(result);
  while (static_cast<int>(entries_.size()) > capacity_) entries_.pop_back();
  if (capacity_ == 0) {
    work_ = at::Tensor();
    result_ = at::Tensor();
  }
}

at::Tensor ReduceScatterCache::Buffer(at::Tensor* buffer, int64_t numel, at::ScalarType dtype) {
  if (!buffer->defined() || buffer->scalar_type() != dtype || buffer->numel() < numel) {
    *buffer = at::Tensor();  // Free before allocating the larger one.
    *buffer = at::empty({numel}, at::TensorOptions().dtype(dtype));
  }
  return buffer->narrow(0, 0, numel);
}

template <typename T>
void ReduceScatterCache::Build(const std::shared_ptr<gloo::Context>& context, int64_t chunk,
                               Entry* e) {
  const int size = context->size;
  if ((size & (size - 1)) == 0) {
    auto algorithm = std::make_shared<RecursiveHalving<T>>(context, e->count);
    e->halving = [a = algorithm.get()](void* data, void* result) {
      a->Run(static_cast<T*>(data), static_cast<T*>(result));
    };
    e->algorithm = std::move(algorithm);
    return;
  }
  e->work = at::empty({e->count}, at::TensorOptions().dtype(c10::CppTypeToScalarType<T>::value));
  std::vector<int> recv_counts(size, static_cast<int>(chunk));
  auto algorithm = std::make_shared<ReduceScatterAndFlush<T>>(
      context, std::vector<T*>{e->work.data_ptr<T>()}, static_cast<int>(e->count), recv_counts);
  e->gloo = [a = algorithm.get()] { a->RunAndFlush(); };
  e->algorithm = std::move(algorithm);
}

ReduceScatterCache::Entry& ReduceScatterCache::Find(const std::shared_ptr<gloo::Context>& context,
                                                    at::ScalarType wide, int64_t count,
                                                    int64_t chunk, uint32_t tag,
                                                    std::chrono::milliseconds timeout) {
  auto it = std::find_if(entries_.begin(), entries_.end(),
                         [&](const Entry& e) { return e.wide == wide && e.count == count; });
  if (it != entries_.end()) {
    entries_.splice(entries_.begin(), entries_, it);
    return entries_.front();
  }
  Entry e;
  e.wide = wide;
  e.count = count;
  if (wide == at::kDouble) {
    Build<double>(context, chunk, &e);
  } else {
    Build<float>(context, chunk, &e);
  }
  entries_.push_front(std::move(e));
  GlooBarrier(context, tag, timeout);
  return entries_.front();
}

}  // namespace shardline::fsdp::gloo_internal
