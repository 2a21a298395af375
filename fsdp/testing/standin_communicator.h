// StandInCommunicator: S ranks of one group on one GPU, for testing the FSDP engine's CUDA path
// at shard degree S > 1 where NCCL cannot run (it refuses two ranks on one GPU). Each rank is a
// thread of the test with its own current stream; all ranks' collectives run on the group's one
// communication stream, following NcclCommunicator's protocol: a ready event recorded on the
// caller's current stream, the communication stream waiting for it, recordStream of every
// tensor on the communication stream, and a done event that Wait() makes the caller's stream
// wait for without blocking the host. Before each collective's copies the communication stream
// runs a delay kernel (at::cuda::sleep), so a consumer not ordered after the done event reads
// stale data and the test catches it.
//
// Issuing never blocks the host either (the FSDP engine issues collectives from backward hooks,
// and LibTorch runs every rank's CUDA backward on one autograd device thread: a host rendezvous
// there would deadlock). A rank posts its tensors and ready event to the group; the last rank
// to post a collective enqueues it for everybody (wait for all ready events, delay, compute
// every rank's output, record the done event, then write the collective's sequence number into
// a device flag). A Wait() before the last rank posted makes the caller's stream wait for that
// flag instead (cuStreamWaitValue32, through cudaGetDriverEntryPointByVersion: no link to the
// driver library): the stream-ordered form of "after the done event".
//
// Reductions sum in rank order pairwise (a tree): with identical inputs on a power-of-two group
// every partial sum is exact, so kAvg returns the input bit for bit and "identical ranks" train
// exactly as one rank does (standin_parity_gpu_test).
//
// Thread safety: one thread per rank (and LibTorch's autograd thread for that rank's backward);
// the group is locked. Collectives must be issued in the same order by every rank.
#ifndef SHARDLINE_FSDP_TESTING_STANDIN_COMMUNICATOR_H_
#define SHARDLINE_FSDP_TESTING_STANDIN_COMMUNICATOR_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "fsdp/communicator.h"

namespace shardline::fsdp::testing {

class StandInGroup;

class StandInCommunicator : public Communicator {
 public:
  // `size` communicators of one group on the current CUDA device, index = rank. delay_cycles:
  // the delay kernel's length before each collective (0: none). Errors: UNAVAILABLE without a
  // GPU or without the driver's stream memory operations.
  static absl::StatusOr<std::vector<std::unique_ptr<StandInCommunicator>>> MakeGroup(
      const std::string& name, int size, int64_t delay_cycles = 1 << 20);

  int rank() const override { return rank_; }
  int size() const override;
  const std::string& name() const override;
  void set_step(int64_t step) override { step_ = step; }

  absl::Status AllGather(const at::Tensor& in, const at::Tensor& out) override;
  std::unique_ptr<CommHandle> AllGatherAsync(const at::Tensor& in, const at::Tensor& out) override;
  absl::Status ReduceScatter(const at::Tensor& in, const at::Tensor& out, ReduceOp op) override;
  std::unique_ptr<CommHandle> ReduceScatterAsync(const at::Tensor& in, const at::Tensor& out,
                                                 ReduceOp op) override;
  absl::Status AllReduce(const at::Tensor& t, ReduceOp op) override;
  std::unique_ptr<CommHandle> AllReduceAsync(const at::Tensor& t, ReduceOp op) override;
  absl::Status Broadcast(const at::Tensor& t, int root) override;
  absl::Status Barrier() override;

  // Collectives this rank issued, and how many of its Waits came before the last rank posted
  // (waited on the flag rather than the done event).
  int64_t collectives() const { return collectives_; }
  int64_t flag_waits() const { return flag_waits_; }

 private:
  StandInCommunicator(std::shared_ptr<StandInGroup> group, int rank)
      : group_(std::move(group)), rank_(rank) {}
  friend class StandInGroup;
  friend class StandInHandle;

  enum class Op { kAllGather, kReduceScatter, kAllReduce, kBroadcast, kBarrier };
  std::unique_ptr<CommHandle> Post(Op op, absl::Status args, std::vector<at::Tensor> tensors,
                                   ReduceOp reduce, int root);
  // The sync forms: the host waits until the collective completed on the device.
  static absl::Status Finish(std::unique_ptr<CommHandle> handle);

  std::shared_ptr<StandInGroup> group_;
  const int rank_;
  int64_t step_ = 0;
  int64_t collectives_ = 0;
  int64_t flag_waits_ = 0;
};

}  // namespace shardline::fsdp::testing

#endif  // SHARDLINE_FSDP_TESTING_STANDIN_COMMUNICATOR_H_
