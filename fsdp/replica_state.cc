#include "fsdp/replica_state.h"

#include <vector>

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/torch_status.h"

namespace shardline::fsdp {
namespace {

constexpr uint64_t kFnvOffset = 1469598103934665603ULL;
constexpr uint64_t kFnvPrime = 1099511628211ULL;

void HashBytes(const void* data, size_t n, uint64_t* h) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    *h ^= p[i];
    *h *= kFnvPrime;
  }
}

void HashTensor(const at::Tensor& t, uint64_t* h) {
  const at::Tensor host = t.detach().to(at::kCPU).contiguous();
  const int64_t n = host.numel();
  HashBytes(&n, sizeof(n), h);
  HashBytes(host.data_ptr(), static_cast<size_t>(host.nbytes()), h);
}

// Broadcasts `t` (any device; the communicator works on the engine's device) in place.
absl::Status BroadcastInto(Communicator* comm, const at::Tensor& t, int root,
                           const at::Device& device) {
  if (t.numel() == 0) return absl::OkStatus();
  at::Tensor buf = t.detach().to(device).contiguous();
  const bool aliased = buf.is_same(t) || buf.data_ptr() == t.data_ptr();
  RETURN_IF_ERROR(comm->Broadcast(buf, root));
  if (!aliased) {
    at::NoGradGuard no_grad;
    t.detach().copy_(buf);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<uint64_t> StateDigest(const FsdpEngine& engine, const ShardedOptimizer* optimizer) {
  uint64_t h = kFnvOffset;
  RETURN_IF_ERROR(TorchCall("state digest", [&] {
    at::NoGradGuard no_grad;
    engine.WaitForOffloadCopies();
    for (const auto& flat : engine.flat_params()) {
      HashTensor(flat->shard().narrow(0, 0, flat->valid_shard_numel()), &h);
    }
    if (optimizer != nullptr) {
      for (const ShardSlice& s : optimizer->LocalState()) HashTensor(s.local, &h);
      const int64_t step = optimizer->step_count();
      HashBytes(&step, sizeof(step), &h);
    }
  }));
  return h;
}

absl::Status BroadcastReplicaState(FsdpEngine& engine, ShardedOptimizer* optimizer,
                                   Communicator* replicate, int root,
                                   std::vector<int64_t>* progress) {
  const int size = replicate == nullptr ? 1 : replicate->size();
  if (root < 0 || root >= size) {
    return absl::InvalidArgumentError(absl::StrCat("BroadcastReplicaState: root ", root,
                                                   " is outside the replicate group of ", size));
  }
  if (size == 1) return absl::OkStatus();
  const at::Device device = engine.device();
  engine.ReshardAll();  // Gathered copies would be stale.
  engine.WaitForOffloadCopies();
  absl::Status status;
  absl::Status torch = TorchCall("heal broadcast", [&] {
    for (const auto& flat : engine.flat_params()) {
      status = BroadcastInto(replicate, flat->shard(), root, device);
      if (!status.ok()) return;
    }
    if (optimizer != nullptr) {
      for (const ShardSlice& s : optimizer->LocalState()) {
        status = BroadcastInto(replicate, s.local, root, device);
        if (!status.ok()) return;
      }
    }
    std::vector<int64_t> values = {optimizer == nullptr ? 0 : optimizer->step_count()};
    values.insert(values.end(), progress->begin(), progress->end());
    at::Tensor t = at::tensor(values, at::kLong).to(device);
    status = replicate->Broadcast(t, root);
    if (!status.ok()) return;
    const at::Tensor host = t.cpu();
    if (replicate->rank() == root) return;
    for (size_t i = 0; i < progress->size(); ++i) (*progress)[i] = host[i + 1].item<int64_t>();
    if (optimizer != nullptr) optimizer->set_step_count(host[0].item<int64_t>());
  });
  RETURN_IF_ERROR(status);
  return torch;
}

absl::StatusOr<bool> DigestsAgree(const FsdpEngine& engine, uint64_t digest) {
  Communicator* replicate = engine.replicate_comm();
  if (replicate == nullptr || replicate->size() == 1) return true;
  const int64_t r = replicate->size();
  if (r > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("DigestsAgree: a replicate group of ", r, " ranks (at most 1024)"));
  }
  // Four 16-bit chunks c of the digest and their squares, summed over the group in float64: each
  // sum is exact (R * 2^32 < 2^53 for R <= 1024, and so are sum^2 and R * sum c^2), and
  // (sum c)^2 == R * (sum c^2) holds exactly when every member's c is the same (the equality
  // case of Cauchy-Schwarz). So one all-reduce decides, and NCCL needs no all-gather of int64.
  std::vector<double> values(8);
  for (int i = 0; i < 4; ++i) {
    const double c = static_cast<double>((digest >> (16 * i)) & 0xffff);
    values[i] = c;
    values[4 + i] = c * c;
  }
  at::Tensor t = at::tensor(values, at::kDouble).to(engine.device());
  RETURN_IF_ERROR(replicate->AllReduce(t, ReduceOp::kSum));
  const at::Tensor host = t.cpu();
  const double* sums = host.data_ptr<double>();
  for (int i = 0; i < 4; ++i) {
    if (sums[i] * sums[i] != static_cast<double>(r) * sums[4 + i]) return false;
  }
  return true;
}

}  // namespace shardline::fsdp
