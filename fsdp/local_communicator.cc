#include "fsdp/local_communicator.h"

#include "fsdp/comm_args.h"
#include "fsdp/comm_queue.h"

namespace shardline::fsdp {
namespace {

absl::Status CopyUnlessSame(const at::Tensor& in, const at::Tensor& out) {
  if (in.data_ptr() != out.data_ptr()) out.view({-1}).copy_(in.reshape({-1}));
  return absl::OkStatus();
}

}  // namespace

absl::Status LocalCommunicator::AllGather(const at::Tensor& in, const at::Tensor& out) {
  if (!in.defined()) return CheckAllGatherArgs(name_, 1, at::kCPU, in, out);
  absl::Status s = CheckAllGatherArgs(name_, 1, in.device().type(), in, out);
  return s.ok() ? CopyUnlessSame(in, out) : s;
}

std::unique_ptr<CommHandle> LocalCommunicator::AllGatherAsync(const at::Tensor& in,
                                                              const at::Tensor& out) {
  return std::make_unique<ReadyHandle>(AllGather(in, out));
}

absl::Status LocalCommunicator::ReduceScatter(const at::Tensor& in, const at::Tensor& out,
                                              ReduceOp /*op*/) {
  if (!in.defined()) return CheckReduceScatterArgs(name_, 1, at::kCPU, in, out);
  absl::Status s = CheckReduceScatterArgs(name_, 1, in.device().type(), in, out);
  return s.ok() ? CopyUnlessSame(in, out) : s;
}

std::unique_ptr<CommHandle> LocalCommunicator::ReduceScatterAsync(const at::Tensor& in,
                                                                  const at::Tensor& out,
                                                                  ReduceOp op) {
  return std::make_unique<ReadyHandle>(ReduceScatter(in, out, op));
}

std::unique_ptr<CommHandle> LocalCommunicator::ReduceScatterConsumingAsync(const at::Tensor& in,
                                                                           const at::Tensor& out,
                                                                           ReduceOp op) {
  return ReduceScatterAsync(in, out, op);
}

absl::Status LocalCommunicator::AllReduce(const at::Tensor& t, ReduceOp op) {
  return CheckAllReduceArgs(name_, t.defined() ? t.device().type() : at::kCPU, t,
                            op == ReduceOp::kAvg);
}

std::unique_ptr<CommHandle> LocalCommunicator::AllReduceAsync(const at::Tensor& t, ReduceOp op) {
  return std::make_unique<ReadyHandle>(AllReduce(t, op));
}

absl::Status LocalCommunicator::Broadcast(const at::Tensor& t, int root) {
  return CheckBroadcastArgs(name_, 1, t.defined() ? t.device().type() : at::kCPU, t, root);
}

}  // namespace shardline::fsdp
