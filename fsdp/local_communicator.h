// LocalCommunicator: the Communicator of a group with one rank (the shard group of NO_SHARD,
// the replicate group of FULL_SHARD). Every collective is a local copy or nothing; no thread,
// no sockets. Works for CPU and CUDA tensors alike (copies run on the current stream).
//
// Thread safety: as communicator.h; holds no mutable state besides the step.
#ifndef SHARDLINE_FSDP_LOCAL_COMMUNICATOR_H_
#define SHARDLINE_FSDP_LOCAL_COMMUNICATOR_H_

#include <atomic>
#include <memory>
#include <string>

#include "fsdp/communicator.h"

namespace shardline::fsdp {

class LocalCommunicator : public Communicator {
 public:
  explicit LocalCommunicator(std::string name) : name_(std::move(name)) {}

  int rank() const override { return 0; }
  int size() const override { return 1; }
  const std::string& name() const override { return name_; }
  void set_step(int64_t step) override { step_ = step; }

  // out = in (no copy when they share memory).
  absl::Status AllGather(const at::Tensor& in, const at::Tensor& out) override;
  std::unique_ptr<CommHandle> AllGatherAsync(const at::Tensor& in, const at::Tensor& out) override;
  // out = in; the average over one rank is the value itself.
  absl::Status ReduceScatter(const at::Tensor& in, const at::Tensor& out, ReduceOp op) override;
  std::unique_ptr<CommHandle> ReduceScatterAsync(const at::Tensor& in, const at::Tensor& out,
                                                 ReduceOp op) override;
  // The same copy: nothing to save by consuming `in` in a group of one.
  std::unique_ptr<CommHandle> ReduceScatterConsumingAsync(const at::Tensor& in,
                                                          const at::Tensor& out,
                                                          ReduceOp op) override;
  // Nothing to do beyond checking the arguments.
  absl::Status AllReduce(const at::Tensor& t, ReduceOp op) override;
  std::unique_ptr<CommHandle> AllReduceAsync(const at::Tensor& t, ReduceOp op) override;
  absl::Status Broadcast(const at::Tensor& t, int root) override;
  absl::Status Barrier() override { return absl::OkStatus(); }

 private:
  const std::string name_;
  std::atomic<int64_t> step_{0};
};

}  // namespace shardline::fsdp

#endif  // SHARDLINE_FSDP_LOCAL_COMMUNICATOR_H_
