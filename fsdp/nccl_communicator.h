// NcclCommunicator: the Communicator for CUDA tensors, one ncclComm_t per group.
//
// Bootstrap: rank 0 of the group creates an ncclUniqueId and publishes it in the KvStore (key
// "nccl_unique_id" under the group's prefix); the others read it. The communicator is created
// non-blocking (ncclConfig_t::blocking = 0) and polled, so a peer that never arrives ends in
// DEADLINE_EXCEEDED instead of a hang.
//
// Streams: every collective runs on the communicator's own CUDA stream. It first waits for an
// event recorded on the caller's current stream (so inputs written there are ready), then runs
// NCCL, then records a "done" event. Tensors are registered with the caching allocator for the
// communication stream (recordStream), so freeing them early cannot hand their memory to
// other work while NCCL still uses it.
//
// Handles and timeouts (after PyTorch's NCCL process group): a handle's Wait() does not block
// the host. It makes the caller's current stream wait for the collective's done event
// (cudaStreamWaitEvent) and returns. A watchdog thread per communicator (comm_watchdog.h) polls
// the done events of outstanding collectives every few milliseconds; when one runs past
// Options::timeout (counted from the call that issued it), or NCCL reports an asynchronous error
// (a lost peer), it calls ncclCommAbort once (which ends kernels stuck on a dead peer, so the
// streams waiting on them drain) and fails every outstanding collective: DEADLINE_EXCEEDED or
// UNAVAILABLE, "group <name> op <op> step <step>: ...". That error shows in AsyncError(), in a
// Wait() not yet called, and as FAILED_PRECONDITION in every later call (the communicator is
// broken). No NCCL call touches the communicator after the abort (they all go through the
// watchdog's lock), and nothing synchronizes a stream or the device without a bound: the
// destructor waits for outstanding work at most `timeout`, then aborts instead of finalizing.
// The synchronous forms (AllGather, ..., Barrier) block the host until the collective finished or
// the watchdog failed it, then return its status.
//
// kAvg uses NCCL's ncclAvg. Dtypes: float32, bfloat16, float16, float64, int64 (NCCL supports
// bf16 natively; no conversion).
//
// Thread safety: as communicator.h (one issuing thread). Only built where CUDA exists; running
// it needs a GPU.
#ifndef SHARDLINE_FSDP_NCCL_COMMUNICATOR_H_
#define SHARDLINE_FSDP_NCCL_COMMUNICATOR_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "fsdp/communicator.h"
#include "fsdp/kv_store.h"

namespace shardline::fsdp {

class NcclCommunicator : public Communicator {
 public:
  struct Options {
    std::string name = "world";
    int rank = 0;
    int size = 1;
    KvStore* store = nullptr;  // Namespaced for this group; used only inside Create.
    int cuda_device = -1;      // -1: the current device.
    absl::Duration timeout = absl::Seconds(60);
    // Global ranks of the group's members, in group-rank order; named in timeout and lost-peer
    // messages (comm_args.h's DescribeGroupMembers). Optional.
    std::vector<int> global_ranks;
  };

  // Errors: INVALID_ARGUMENT for bad options; UNAVAILABLE if CUDA/NCCL fail to initialise;
  // DEADLINE_EXCEEDED if the peers do not all join within the timeout.
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> Create(const Options& options);
  ~NcclCommunicator() override;  // Destroys (or, if broken, has aborted) the ncclComm_t.

  int rank() const override;
  int size() const override;
  const std::string& name() const override;
  void set_step(int64_t step) override;
  void Abandon() override;

  absl::Status AllGather(const at::Tensor& in, const at::Tensor& out) override;
  std::unique_ptr<CommHandle> AllGatherAsync(const at::Tensor& in, const at::Tensor& out) override;
  absl::Status ReduceScatter(const at::Tensor& in, const at::Tensor& out, ReduceOp op) override;
  std::unique_ptr<CommHandle> ReduceScatterAsync(const at::Tensor& in, const at::Tensor& out,
                                                 ReduceOp op) override;
  // ncclReduceScatter only reads `in`: nothing to save, forwards to ReduceScatterAsync.
  std::unique_ptr<CommHandle> ReduceScatterConsumingAsync(const at::Tensor& in,
                                                          const at::Tensor& out,
                                                          ReduceOp op) override;
  absl::Status AllReduce(const at::Tensor& t, ReduceOp op) override;
  std::unique_ptr<CommHandle> AllReduceAsync(const at::Tensor& t, ReduceOp op) override;
  absl::Status Broadcast(const at::Tensor& t, int root) override;
  absl::Status Barrier() override;
  // The watchdog's first failure (see above), or OK.
  absl::Status AsyncError() const override;

  class Impl;

 private:
  explicit NcclCommunicator(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;  // Shared with outstanding handles.
};

}  // namespace shardline::fsdp

#endif  // SHARDLINE_FSDP_NCCL_COMMUNICATOR_H_
