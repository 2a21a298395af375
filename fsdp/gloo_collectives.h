// The Gloo collectives GlooCommunicator runs, as plain calls on a connected context.
// Implementation of GlooCommunicator, not for other callers (Bazel-private to //fsdp).
//
// Each runs Gloo's own algorithm with the tag and timeout the communicator gives it and throws
// what Gloo throws; gloo_errors.h turns that into a status. Reduce-scatter has its own file:
// gloo_reduce_scatter_cache.h.
//
// Thread safety: call on the communicator's communication thread only (a Gloo context runs
// one collective at a time).
#ifndef SHARDLINE_FSDP_GLOO_COLLECTIVES_H_
#define SHARDLINE_FSDP_GLOO_COLLECTIVES_H_

#include <chrono>
#include <cstdint>
#include <memory>

#include <ATen/core/Tensor.h>

#include "absl/time/time.h"
#include "fsdp/communicator.h"

namespace gloo {
class Context;
}  // namespace gloo

namespace shardline::fsdp::gloo_internal {

// Gloo takes its timeouts as std::chrono::milliseconds.
std::chrono::milliseconds ToChrono(absl::Duration d);

// gloo::allgather (ring) on raw bytes: `out` ([size * n] bytes of any dtype) gets every rank's
// `in`. In place when `in` already is this rank's slot of `out`.
void GlooAllGather(const std::shared_ptr<gloo::Context>& context, const at::Tensor& in,
                   const at::Tensor& out, uint32_t tag, std::chrono::milliseconds timeout);

// gloo::allreduce (ring), in place in `t`. fp64, int64 and fp32 sum in their own dtype;
// bf16/fp16 sum in fp32 and are rounded once. kAvg divides the sum by the group size.
void GlooAllReduce(const std::shared_ptr<gloo::Context>& context, const at::Tensor& t, ReduceOp op,
                   uint32_t tag, std::chrono::milliseconds timeout);

// gloo::broadcast of `t`'s bytes from `root`.
void GlooBroadcast(const std::shared_ptr<gloo::Context>& context, const at::Tensor& t, int root,
                   uint32_t tag, std::chrono::milliseconds timeout);

// gloo::barrier.
void GlooBarrier(const std::shared_ptr<gloo::Context>& context, uint32_t tag,
                 std::chrono::milliseconds timeout);

}  // namespace shardline::fsdp::gloo_internal

#endif  // SHARDLINE_FSDP_GLOO_COLLECTIVES_H_
