#include "fsdp/gloo_collectives.h"

#include "gloo/allgather.h"
#include "gloo/allreduce.h"
#include "gloo/barrier.h"
#include "gloo/broadcast.h"
#include "gloo/context.h"
#include "gloo/math.h"

namespace shardline::fsdp::gloo_internal {
namespace {

template <typename T>
void AllReduceSum(const std::shared_ptr<gloo::Context>& context, T* data, size_t n, uint32_t tag,
                  std::chrono::milliseconds timeout) {
  gloo::AllreduceOptions opts(context);
  opts.setOutput(data, n);  // No input: in place.
  opts.setReduceFunction(
      static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<T>));
  opts.setTag(tag);
  opts.setTimeout(timeout);
  gloo::allreduce(opts);
}

}  // namespace

std::chrono::milliseconds ToChrono(absl::Duration d) {
  return std::chrono::milliseconds(absl::ToInt64Milliseconds(d));
}

void GlooAllGather(const std::shared_ptr<gloo::Context>& context, const at::Tensor& in,
                   const at::Tensor& out, uint32_t tag, std::chrono::milliseconds timeout) {
  gloo::AllgatherOptions opts(context);
  uint8_t* out_ptr = static_cast<uint8_t*>(out.data_ptr());
  const size_t chunk_bytes = in.nbytes();
  // In place when `in` already is this rank's slot of `out` (FSDP gathers that way).
  if (static_cast<uint8_t*>(in.data_ptr()) != out_ptr + context->rank * chunk_bytes) {
    opts.setInput(static_cast<uint8_t*>(in.data_ptr()), chunk_bytes);
  }
  opts.setOutput(out_ptr, out.nbytes());
  opts.setTag(tag);
  opts.setTimeout(timeout);
  gloo::allgather(opts);
}

void GlooAllReduce(const std::shared_ptr<gloo::Context>& context, const at::Tensor& t, ReduceOp op,
                   uint32_t tag, std::chrono::milliseconds timeout) {
  const int group_size = context->size;
  const size_t n = t.numel();
  switch (t.scalar_type()) {
    case at::kDouble:
      AllReduceSum<double>(context, t.data_ptr<double>(), n, tag, timeout);
      break;
    case at::kLong:
      AllReduceSum<int64_t>(context, t.data_ptr<int64_t>(), n, tag, timeout);
      break;
    case at::kFloat:
      AllReduceSum<float>(context, t.data_ptr<float>(), n, tag, timeout);
      break;
    default: {  // bf16 / fp16: sum in fp32, round once.
      at::Tensor wide = t.to(at::kFloat);
      AllReduceSum<float>(context, wide.data_ptr<float>(), n, tag, timeout);
      if (op == ReduceOp::kAvg) wide.div_(group_size);
      t.copy_(wide);
      return;
    }
  }
  if (op == ReduceOp::kAvg) t.div_(group_size);
}

void GlooBroadcast(const std::shared_ptr<gloo::Context>& context, const at::Tensor& t, int root,
                   uint32_t tag, std::chrono::milliseconds timeout) {
  gloo::BroadcastOptions opts(context);
  opts.setOutput(static_cast<uint8_t*>(t.data_ptr()), t.nbytes());
  opts.setRoot(root);
  opts.setTag(tag);
  opts.setTimeout(timeout);
  gloo::broadcast(opts);
}

void GlooBarrier(const std::shared_ptr<gloo::Context>& context, uint32_t tag,
                 std::chrono::milliseconds timeout) {
  gloo::BarrierOptions opts(context);
  opts.setTag(tag);
  opts.setTimeout(timeout);
  gloo::barrier(opts);
}

}  // namespace shardline::fsdp::gloo_internal
