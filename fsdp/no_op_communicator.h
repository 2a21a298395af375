// NoOpCommunicator: a Communicator of a group of size() ranks that sends nothing. Every
// collective checks its arguments exactly like the real backends (same shapes, dtypes, devices,
// same INVALID_ARGUMENT messages) and then does only local work, so a training step runs with the
// same tensor shapes and the same schedule but without communication: step time with it over step
// time with real collectives is what communication costs (fsdp.fake_collectives; PyTorch's
// FakeProcessGroup does the same for its all-gather).
//
// What the outputs hold (chosen so training stays finite and the local work is at most one copy):
//   AllGather(in, out)       every one of the size() chunks of out = in (as PyTorch's fake
//                            all-gather: "each rank has the same input"); a copy of out's size.
//   ReduceScatter(in, out)   out = chunk rank() of in, unreduced (as if every rank held the same
//                            gradient); a copy of out's size.
//   AllReduce(t), Broadcast(t, root), Barrier()
//                            nothing: t keeps its value.
// The *Async forms do the same work inline and return a ready handle.
// Numerics therefore differ from a real run (a gathered FSDP unit is the rank's own shard
// repeated; each rank trains on its own gradient); use it for timing and memory only.
//
// Thread safety: as communicator.h; the counters are atomics and may be read from any thread.
#ifndef SHARDLINE_FSDP_NO_OP_COMMUNICATOR_H_
#define SHARDLINE_FSDP_NO_OP_COMMUNICATOR_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "fsdp/communicator.h"

namespace shardline::fsdp {

// Calls and bytes (of `out` for all-gather and reduce-scatter input, of t for the in-place ones)
// the communicator was asked to move, counting only calls whose arguments were valid.
struct NoOpCommCounts {
  int64_t all_gathers = 0, reduce_scatters = 0, all_reduces = 0, broadcasts = 0, barriers = 0;
  int64_t all_gather_bytes = 0, reduce_scatter_bytes = 0, all_reduce_bytes = 0, broadcast_bytes = 0;
};

class NoOpCommunicator : public Communicator {
 public:
  // `device`: at::kCPU or at::kCUDA, the device every tensor must be on (as the backend it
  // replaces: Gloo takes CPU tensors, NCCL CUDA ones). Requires 0 <= rank < size.
  NoOpCommunicator(std::string name, int rank, int size, at::DeviceType device);

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  void set_step(int64_t step) override { step_ = step; }

  absl::Status AllGather(const at::Tensor& in, const at::Tensor& out) override;
  std::unique_ptr<CommHandle> AllGatherAsync(const at::Tensor& in, const at::Tensor& out) override;
  absl::Status ReduceScatter(const at::Tensor& in, const at::Tensor& out, ReduceOp op) override;
  std::unique_ptr<CommHandle> ReduceScatterAsync(const at::Tensor& in, const at::Tensor& out,
                                                 ReduceOp op) override;
  // Same as ReduceScatterAsync (counted as a reduce-scatter): `in` is left as it was, which the
  // consuming contract allows, so a fake run costs what a real backend costs at best.
  std::unique_ptr<CommHandle> ReduceScatterConsumingAsync(const at::Tensor& in,
                                                          const at::Tensor& out,
                                                          ReduceOp op) override;
  absl::Status AllReduce(const at::Tensor& t, ReduceOp op) override;
  std::unique_ptr<CommHandle> AllReduceAsync(const at::Tensor& t, ReduceOp op) override;
  absl::Status Broadcast(const at::Tensor& t, int root) override;
  absl::Status Barrier() override;

  NoOpCommCounts counts() const;

 private:
  const std::string name_;
  const int rank_, size_;
  const at::DeviceType device_;
  std::atomic<int64_t> step_{0};
  std::atomic<int64_t> all_gathers_{0}, reduce_scatters_{0}, all_reduces_{0}, broadcasts_{0},
      barriers_{0};
  std::atomic<int64_t> all_gather_bytes_{0}, reduce_scatter_bytes_{0}, all_reduce_bytes_{0},
      broadcast_bytes_{0};
};

}  // namespace shardline::fsdp

#endif  // SHARDLINE_FSDP_NO_OP_COMMUNICATOR_H_
