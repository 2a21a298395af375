#include "fsdp/no_op_communicator.h"

#include <utility>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include "fsdp/comm_args.h"
#include "fsdp/comm_queue.h"

namespace shardline::fsdp {

NoOpCommunicator::NoOpCommunicator(std::string name, int rank, int size, at::DeviceType device)
    : name_(std::move(name)), rank_(rank), size_(size), device_(device) {}

absl::Status NoOpCommunicator::AllGather(const at::Tensor& in, const at::Tensor& out) {
  absl::Status s = CheckAllGatherArgs(name_, size_, device_, in, out);
  if (!s.ok()) return s;
  ++all_gathers_;
  all_gather_bytes_ += out.numel() * static_cast<int64_t>(out.element_size());
  at::NoGradGuard no_grad;
  // One broadcasting copy: out viewed as [size, n] gets `in` in every row.
  out.view({size_, in.numel()}).copy_(in.reshape({1, -1}));
  return absl::OkStatus();
}

std::unique_ptr<CommHandle> NoOpCommunicator::AllGatherAsync(const at::Tensor& in,
                                                             const at::Tensor& out) {
  return std::make_unique<ReadyHandle>(AllGather(in, out));
}

absl::Status NoOpCommunicator::ReduceScatter(const at::Tensor& in, const at::Tensor& out,
                                             ReduceOp /*op*/) {
  absl::Status s = CheckReduceScatterArgs(name_, size_, device_, in, out);
  if (!s.ok()) return s;
  ++reduce_scatters_;
  reduce_scatter_bytes_ += in.numel() * static_cast<int64_t>(in.element_size());
  at::NoGradGuard no_grad;
  const int64_t n = out.numel();
  out.view({-1}).copy_(in.reshape({-1}).narrow(0, rank_ * n, n));
  return absl::OkStatus();
}

std::unique_ptr<CommHandle> NoOpCommunicator::ReduceScatterAsync(const at::Tensor& in,
                                                                 const at::Tensor& out,
                                                                 ReduceOp op) {
  return std::make_unique<ReadyHandle>(ReduceScatter(in, out, op));
}

std::unique_ptr<CommHandle> NoOpCommunicator::ReduceScatterConsumingAsync(const at::Tensor& in,
                                                                          const at::Tensor& out,
                                                                          ReduceOp op) {
  return ReduceScatterAsync(in, out, op);
}

absl::Status NoOpCommunicator::AllReduce(const at::Tensor& t, ReduceOp op) {
  absl::Status s = CheckAllReduceArgs(name_, device_, t, op == ReduceOp::kAvg);
  if (!s.ok()) return s;
  ++all_reduces_;
  all_reduce_bytes_ += t.numel() * static_cast<int64_t>(t.element_size());
  return absl::OkStatus();
}

std::unique_ptr<CommHandle> NoOpCommunicator::AllReduceAsync(const at::Tensor& t, ReduceOp op) {
  return std::make_unique<ReadyHandle>(AllReduce(t, op));
}

absl::Status NoOpCommunicator::Broadcast(const at::Tensor& t, int root) {
  absl::Status s = CheckBroadcastArgs(name_, size_, device_, t, root);
  if (!s.ok()) return s;
  ++broadcasts_;
  broadcast_bytes_ += t.numel() * static_cast<int64_t>(t.element_size());
  return absl::OkStatus();
}

absl::Status NoOpCommunicator::Barrier() {
  ++barriers_;
  return absl::OkStatus();
}

NoOpCommCounts NoOpCommunicator::counts() const {
  NoOpCommCounts c;
  c.all_gathers = all_gathers_;
  c.reduce_scatters = reduce_scatters_;
  c.all_reduces = all_reduces_;
  c.broadcasts = broadcasts_;
  c.barriers = barriers_;
  c.all_gather_bytes = all_gather_bytes_;
  c.reduce_scatter_bytes = reduce_scatter_bytes_;
  c.all_reduce_bytes = all_reduce_bytes_;
  c.broadcast_bytes = broadcast_bytes_;
  return c;
}

}  // namespace shardline::fsdp
