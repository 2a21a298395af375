// ReduceScatterCache: GlooCommunicator's reduce-scatter, with its algorithm instances kept for
// reuse. Implementation of GlooCommunicator, not for other callers (Bazel-private to //fsdp).
// The algorithms: RecursiveHalving (gloo_recursive_halving.h) in power-of-two groups,
// gloo::ReduceScatterHalvingDoubling (wrapped in gloo_reduce_scatter_cache.cc) in others.
#ifndef SHARDLINE_FSDP_GLOO_REDUCE_SCATTER_CACHE_H_
#define SHARDLINE_FSDP_GLOO_REDUCE_SCATTER_CACHE_H_

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>

#include <ATen/core/Tensor.h>

#include "fsdp/communicator.h"

namespace gloo {
class Context;
}  // namespace gloo

namespace shardline::fsdp::gloo_internal {

// The reduce-scatter of one communicator: its algorithm instances, kept for reuse, most
// recently used first, by (summing dtype, input size). Used on the communication thread only.
//
// Power-of-two groups run RecursiveHalving in place: in the caller's input when the caller
// consumes it (ReduceScatterConsuming) and it is already in the summing dtype, else in a
// working copy. Other group sizes run gloo::ReduceScatterHalvingDoubling (which handles the
// binary blocks) on its own buffer, so always on a copy. fp64 is summed in fp64, everything
// else (fp32, and bf16/fp16 which Gloo cannot sum well or at all) in fp32, and the result is
// rounded once into `out`.
//
// Why keep instances: both register their receive buffers with the TCP pairs once, as Gloo's
// "old-style" algorithms are meant to be used (construct once, run many times). Data that
// arrives for a buffer not registered yet makes the pair's event loop spin until it is, which
// on a small machine starves the very ranks it waits for (tens of ms per call, measured), and
// each construction allocates receive buffers of about the input's size. FSDP reduce-scatters
// the same few sizes every step (identical blocks share one), so a small cache makes the
// steady state allocation-free. A new instance is followed by a barrier, so every rank has
// registered its buffers before anyone sends. All ranks issue the same sequence of sizes, so
// their caches hit and miss together (the barrier is collective). Memory per entry: about 1x
// its input (power-of-two groups) or 3x (others: work copy + Gloo's two receive buffers); the
// working copy of ReduceScatter (power-of-two groups) is one buffer, grown to the largest
// input. GlooCommunicator::Options::reduce_scatter_cache_entries = 0 keeps nothing.
class ReduceScatterCache {
 public:
  explicit ReduceScatterCache(int capacity) : capacity_(std::max(capacity, 0)) {}

  // Reduce-scatters `in` ([size * n], checked by the caller) into `out` ([n]) with Gloo's
  // `context`, `tag` and `timeout` (kAvg divides the sum by the group size); with
  // `consume_input` it may reduce in `in` itself, which it then clobbers. Throws what Gloo
  // throws (gloo_errors.h).
  void Run(const std::shared_ptr<gloo::Context>& context, const at::Tensor& in,
           const at::Tensor& out, ReduceOp op, bool consume_input, uint32_t tag,
           std::chrono::milliseconds timeout);

 private:
  struct Entry {
    at::ScalarType wide;
    int64_t count;
    std::shared_ptr<void> algorithm;  // RecursiveHalving<T> or ReduceScatterAndFlush<T>.
    // Power-of-two groups: reduce in `data`, this rank's chunk to `result` (both `wide`).
    std::function<void(void* data, void* result)> halving;
    // Other groups: Gloo's instance, on `work`.
    at::Tensor work;
    std::function<void()> gloo;
  };

  // The first `numel` elements of *buffer, (re)allocated in `dtype` when too small.
  static at::Tensor Buffer(at::Tensor* buffer, int64_t numel, at::ScalarType dtype);

  Entry& Find(const std::shared_ptr<gloo::Context>& context, at::ScalarType wide, int64_t count,
              int64_t chunk, uint32_t tag, std::chrono::milliseconds timeout);

  template <typename T>
  static void Build(const std::shared_ptr<gloo::Context>& context, int64_t chunk, Entry* e);

  const int capacity_;
  std::list<Entry> entries_;
  at::Tensor work_;    // ReduceScatter's working copy (power-of-two groups).
  at::Tensor result_;  // The summed chunk when `out` is not in the summing dtype.
};

}  // namespace shardline::fsdp::gloo_internal

#endif  // SHARDLINE_FSDP_GLOO_REDUCE_SCATTER_CACHE_H_
