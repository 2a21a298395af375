// Communicator: collectives over one group of ranks, on flat tensors.
//
// Backends: GlooCommunicator (CPU tensors, Debian's libgloo algorithms over TCP) and
// NcclCommunicator (CUDA tensors, one ncclComm_t per group, its own stream). The FSDP engine
// only sees this interface, so tests can swap in a fake (fsdp/testing/).
//
// Tensors: contiguous, same dtype and device on every rank of the group; element counts as
// documented per call. Supported dtypes: float32, bfloat16, float16 (and float64/int64 for
// AllReduce of scalars and counters).
//
// Errors: every call takes the communicator's timeout (Options::timeout). A collective that does
// not finish in time returns DEADLINE_EXCEEDED with a message naming the group, the operation and
// the current step ("group shard[1] op reduce_scatter step 17: timed out after 30s"); a lost peer
// returns UNAVAILABLE with the same naming. After such an error the communicator is broken:
// every later call fails fast with FAILED_PRECONDITION.
//
// Thread safety: calls are issued from one thread in the same order on every rank. The *Async
// forms queue the work on the communicator's own thread (CPU) or stream (GPU) and return at once;
// the caller must keep the tensors alive and untouched until Wait() returns.
#ifndef SHARDLINE_FSDP_COMMUNICATOR_H_
#define SHARDLINE_FSDP_COMMUNICATOR_H_

#include <cstdint>
#include <memory>
#include <string>

#include <ATen/core/Tensor.h>

#include "absl/status/status.h"

namespace shardline::fsdp {

enum class ReduceOp { kSum, kAvg };

// Waitable result of an asynchronous collective.
class CommHandle {
 public:
  virtual ~CommHandle() = default;
  // Blocks until the collective finished (GPU: returns at once, once the current stream's later
  // work is ordered after the collective; an error found later shows in
  // Communicator::AsyncError). Returns the collective's status. Calling twice returns the same
  // status.
  virtual absl::Status Wait() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;  // Rank within this group, [0, size()).
  virtual int size() const = 0;
  // Name used in errors, e.g. "shard[1]" or "replicate[0]" or "world".
  virtual const std::string& name() const = 0;

  // Sets the training step quoted in error messages.
  virtual void set_step(int64_t step) = 0;

  // out = concat over ranks r of in_r. Requires out.numel() == in.numel() * size().
  virtual absl::Status AllGather(const at::Tensor& in, const at::Tensor& out) = 0;
  virtual std::unique_ptr<CommHandle> AllGatherAsync(const at::Tensor& in,
                                                     const at::Tensor& out) = 0;

  // out = chunk rank() of (reduction over ranks of in). Requires in.numel() == out.numel() *
  // size(). Never implemented as all-reduce + slice (that doubles the traffic).
  virtual absl::Status ReduceScatter(const at::Tensor& in, const at::Tensor& out, ReduceOp op) = 0;
  virtual std::unique_ptr<CommHandle> ReduceScatterAsync(const at::Tensor& in,
                                                         const at::Tensor& out, ReduceOp op) = 0;

  // As ReduceScatter, except that `in` is handed over as scratch: once the call returns (async:
  // once Wait() returns) its contents are unspecified. `out` must not overlap `in`.
  // Why a second form: Gloo's halving-doubling reduces in place, so to keep `in` intact the
  // Gloo backend first copies all of it (as many bytes as the collective sends, and a second
  // buffer of that size); FSDP reduce-scatters the unit's flat gradient and drops it right after
  // (FsdpEngine::StartReduce), so it has nothing to keep and uses this form.
  // Backends whose reduce-scatter reads `in` without modifying it (NCCL) just forward to
  // ReduceScatterAsync, which is also the default here: it meets this weaker contract.
  virtual std::unique_ptr<CommHandle> ReduceScatterConsumingAsync(const at::Tensor& in,
                                                                  const at::Tensor& out,
                                                                  ReduceOp op) {
    return ReduceScatterAsync(in, out, op);
  }
  absl::Status ReduceScatterConsuming(const at::Tensor& in, const at::Tensor& out, ReduceOp op) {
    return ReduceScatterConsumingAsync(in, out, op)->Wait();
  }

  // In place: t = reduction over ranks of t.
  virtual absl::Status AllReduce(const at::Tensor& t, ReduceOp op) = 0;
  virtual std::unique_ptr<CommHandle> AllReduceAsync(const at::Tensor& t, ReduceOp op) = 0;

  // In place: t = t of rank `root`.
  virtual absl::Status Broadcast(const at::Tensor& t, int root) = 0;

  virtual absl::Status Barrier() = 0;

  // A collective's error found after its Wait() returned OK, or OK. Backends whose Wait blocks
  // the host until the collective finished (Gloo, the in-process fakes) never have one: this
  // default. NCCL's Wait only orders the caller's stream after the collective and returns; its
  // watchdog fails a collective that runs past the timeout later (nccl_communicator.h), and
  // this returns that first error (DEADLINE_EXCEEDED or UNAVAILABLE, named as above).
  virtual absl::Status AsyncError() const { return absl::OkStatus(); }

  // This rank gives the group up after a failure (replica-group fault tolerance leaving a
  // membership that lost a rank): its teardown then skips the closing handshake with its peers
  // (Gloo's closing barrier, NCCL's drain and finalize), so that peers blocked in a collective
  // with this rank fail at once instead of after the handshake's timeout. Collectives issued
  // after it fail. Backends without a closing handshake ignore it.
  virtual void Abandon() {}
};

// Whether `c` talks to other ranks (null, or a group of one, does not: its collectives are
// skipped).
inline bool Collective(const Communicator* c) { return c != nullptr && c->size() > 1; }

}  // namespace shardline::fsdp

#endif  // SHARDLINE_FSDP_COMMUNICATOR_H_
