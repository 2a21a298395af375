#include "fsdp/testing/in_process_communicator.h"

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"

namespace shardline::fsdp::testing {
namespace {

class DoneHandle : public CommHandle {
 public:
  explicit DoneHandle(absl::Status s) : status_(std::move(s)) {}
  absl::Status Wait() override { return status_; }

 private:
  absl::Status status_;
};

at::Tensor Sum(const std::vector<at::Tensor>& all) {
  at::Tensor acc = all[0].clone();
  for (size_t i = 1; i < all.size(); ++i) acc.add_(all[i]);
  return acc;
}

}  // namespace

bool InProcessCommGroup::WaitPhase(int64_t target, absl::Duration timeout) {
  auto reached = [this, target]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return arrived_ >= target; };
  return mu_.AwaitWithTimeout(absl::Condition(&reached), timeout);
}

absl::Status InProcessCommGroup::Exchange(
    int rank, const at::Tensor& t, absl::Duration timeout,
    const std::function<void(const std::vector<at::Tensor>&)>& fn) {
  absl::MutexLock lock(&mu_);
  // Phase boundaries: every collective is two phases of `size_` arrivals each.
  const int64_t base = (arrived_ / (2 * size_)) * (2 * size_);
  posted_[rank] = t;
  ++arrived_;
  if (!WaitPhase(base + size_, timeout)) {
    return absl::DeadlineExceededError("timed out waiting for peers to post");
  }
  std::vector<at::Tensor> all = posted_;
  mu_.Unlock();
  fn(all);
  mu_.Lock();
  ++arrived_;
  if (!WaitPhase(base + 2 * size_, timeout)) {
    return absl::DeadlineExceededError("timed out waiting for peers to finish");
  }
  return absl::OkStatus();
}

std::vector<std::unique_ptr<InProcessCommunicator>> InProcessCommunicator::MakeGroup(
    const std::string& name, int size, absl::Duration timeout) {
  auto group = std::make_shared<InProcessCommGroup>(name, size);
  std::vector<std::unique_ptr<InProcessCommunicator>> out;
  for (int r = 0; r < size; ++r)
    out.push_back(std::make_unique<InProcessCommunicator>(group, r, timeout));
  return out;
}

absl::Status InProcessCommunicator::Run(
    const char* op, const at::Tensor& t,
    const std::function<void(const std::vector<at::Tensor>&)>& fn) {
  if (!broken_.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("group ", name(), " op ", op, " step ", step_,
                     ": communicator broken by an earlier error: ", broken_.message()));
  }
  absl::Status s = group_->Exchange(rank_, t, timeout_, fn);
  if (!s.ok()) {
    broken_ = absl::Status(
        s.code(), absl::StrCat("group ", name(), " op ", op, " step ", step_, ": ", s.message()));
    return broken_;
  }
  return absl::OkStatus();
}

absl::Status InProcessCommunicator::AllGather(const at::Tensor& in, const at::Tensor& out) {
  if (out.numel() != in.numel() * size()) {
    return absl::InvalidArgumentError(absl::StrCat("all_gather: out has ", out.numel(),
                                                   " elements, expected ", in.numel() * size()));
  }
  ++all_gathers_;
  const int64_t n = in.numel();
  return Run("all_gather", in, [&](const std::vector<at::Tensor>& all) {
    at::Tensor flat = out.view({-1});
    for (int r = 0; r < size(); ++r) flat.narrow(0, r * n, n).copy_(all[r].reshape({-1}));
  });
}

std::unique_ptr<CommHandle> InProcessCommunicator::AllGatherAsync(const at::Tensor& in,
                                                                  const at::Tensor& out) {
  ++async_calls_;
  return std::make_unique<DoneHandle>(AllGather(in, out));
}

absl::Status InProcessCommunicator::ReduceScatter(const at::Tensor& in, const at::Tensor& out,
                                                  ReduceOp op) {
  if (in.numel() != out.numel() * size()) {
    return absl::InvalidArgumentError(absl::StrCat("reduce_scatter: in has ", in.numel(),
                                                   " elements, expected ", out.numel() * size()));
  }
  ++reduce_scatters_;
  const int64_t n = out.numel();
  return Run("reduce_scatter", in, [&](const std::vector<at::Tensor>& all) {
    std::vector<at::Tensor> parts;
    for (const at::Tensor& t : all) parts.push_back(t.reshape({-1}).narrow(0, rank_ * n, n));
    at::Tensor acc = Sum(parts);
    if (op == ReduceOp::kAvg) acc.div_(size());
    out.view({-1}).copy_(acc);
  });
}

std::unique_ptr<CommHandle> InProcessCommunicator::ReduceScatterAsync(const at::Tensor& in,
                                                                      const at::Tensor& out,
                                                                      ReduceOp op) {
  return std::make_unique<DoneHandle>(ReduceScatter(in, out, op));
}

absl::Status InProcessCommunicator::AllReduce(const at::Tensor& t, ReduceOp op) {
  ++all_reduces_;
  // Every rank reads all inputs before anyone writes (second phase), so in-place is safe only
  // if we write after the rendezvous: compute into a temporary, copy after.
  at::Tensor result;
  absl::Status s = Run("all_reduce", t, [&](const std::vector<at::Tensor>& all) {
    result = Sum(all);
    if (op == ReduceOp::kAvg) result.div_(size());
  });
  if (s.ok()) t.copy_(result);
  return s;
}

std::unique_ptr<CommHandle> InProcessCommunicator::AllReduceAsync(const at::Tensor& t,
                                                                  ReduceOp op) {
  return std::make_unique<DoneHandle>(AllReduce(t, op));
}

absl::Status InProcessCommunicator::Broadcast(const at::Tensor& t, int root) {
  at::Tensor result;
  absl::Status s =
      Run("broadcast", t, [&](const std::vector<at::Tensor>& all) { result = all[root].clone(); });
  if (s.ok()) t.copy_(result);
  return s;
}

absl::Status InProcessCommunicator::Barrier() {
  return Run("barrier", at::Tensor(), [](const std::vector<at::Tensor>&) {});
}

}  // namespace shardline::fsdp::testing
