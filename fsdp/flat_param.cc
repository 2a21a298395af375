#include "fsdp/flat_param.h"

#include <algorithm>
#include <utility>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/StorageImpl.h>

#include "absl/strings/str_cat.h"
#include "fsdp/param_init.h"

namespace shardline::fsdp {
namespace {

int64_t Bytes(const at::Tensor& t) { return t.defined() ? t.numel() * t.element_size() : 0; }

}  // namespace

absl::StatusOr<std::unique_ptr<FlatParam>> FlatParam::Plan(
    std::string name, std::vector<FlatParamEntry> entries, at::Device device, int shard_rank,
    int shard_count, at::ScalarType compute_dtype, bool cpu_offload) {
  if (compute_dtype != at::kFloat && compute_dtype != at::kBFloat16 && compute_dtype != at::kHalf) {
    return absl::InvalidArgumentError(absl::StrCat("flat param ", name, ": compute dtype ",
                                                   c10::toString(compute_dtype),
                                                   " is not one of float32, bfloat16, float16"));
  }
  if (entries.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("flat param ", name, ": no parameters"));
  }
  if (shard_count < 1 || shard_rank < 0 || shard_rank >= shard_count) {
    return absl::InvalidArgumentError(absl::StrCat("flat param ", name, ": shard_rank ", shard_rank,
                                                   " not in [0, ", shard_count, ")"));
  }
  int64_t offset = 0;
  for (FlatParamEntry& e : entries) {
    if (e.param.scalar_type() != at::kFloat) {
      return absl::InvalidArgumentError(
          absl::StrCat("flat param ", name, ": parameter ", e.name, " has dtype ",
                       c10::toString(e.param.scalar_type()), "; only float32 is supported"));
    }
    if (e.param.device() != device) {
      return absl::InvalidArgumentError(absl::StrCat("flat param ", name, ": parameter ", e.name,
                                                     " is on ", e.param.device().str(),
                                                     ", others on ", device.str()));
    }
    e.shape = e.param.sizes().vec();
    e.numel = e.param.numel();
    e.offset = offset;
    offset += e.numel;
  }
  auto fp = std::unique_ptr<FlatParam>(new FlatParam());
  fp->name_ = std::move(name);
  fp->entries_ = std::move(entries);
  fp->shard_rank_ = shard_rank;
  fp->shard_count_ = shard_count;
  fp->numel_ = offset;
  fp->mixed_ = compute_dtype != at::kFloat;
  fp->offloaded_ = cpu_offload;
  fp->shard_numel_ = (offset + shard_count - 1) / shard_count;
  return fp;
}

absl::StatusOr<std::unique_ptr<FlatParam>> FlatParam::Create(std::string name,
                                                             std::vector<FlatParamEntry> entries,
                                                             int shard_rank, int shard_count,
                                                             at::ScalarType compute_dtype,
                                                             bool cpu_offload) {
  const at::Device device = entries.empty() ? at::Device(at::kCPU) : entries[0].param.device();
  absl::StatusOr<std::unique_ptr<FlatParam>> fp =
      Plan(std::move(name), std::move(entries), device, shard_rank, shard_count, compute_dtype,
           cpu_offload);
  if (!fp.ok()) return fp.status();
  at::NoGradGuard no_grad;
  // Build the padded flat copy once, keep our shard, rebind parameters into full_.
  at::Tensor flat =
      at::zeros({(*fp)->padded_numel()}, at::TensorOptions().dtype(at::kFloat).device(device));
  for (const FlatParamEntry& e : (*fp)->entries_) {
    flat.narrow(0, e.offset, e.numel).copy_(e.param.detach().reshape({-1}));
  }
  (*fp)->BuildBuffers(flat, device, compute_dtype);
  return fp;
}

absl::StatusOr<std::unique_ptr<FlatParam>> FlatParam::CreateUninitialized(
    std::string name, std::vector<FlatParamEntry> entries, at::Device device, int shard_rank,
    int shard_count, at::ScalarType compute_dtype, bool cpu_offload) {
  // Storage-less parameters are CPU tensors whatever `device` is (param_init.h).
  for (FlatParamEntry& e : entries) {
    if (e.param.defined() && !IsStorageless(e.param)) {
      return absl::InvalidArgumentError(absl::StrCat("flat param ", name, ": parameter ", e.name,
                                                     " holds memory; sharded initialization "
                                                     "needs storage-less parameters"));
    }
  }
  const at::Device planned = entries.empty() ? device : entries[0].param.device();
  absl::StatusOr<std::unique_ptr<FlatParam>> fp =
      Plan(std::move(name), std::move(entries), planned, shard_rank, shard_count, compute_dtype,
           cpu_offload);
  if (!fp.ok()) return fp.status();
  at::NoGradGuard no_grad;
  (*fp)->BuildBuffers(at::Tensor(), device, compute_dtype);
  return fp;
}

void FlatParam::BuildBuffers(const at::Tensor& flat, at::Device device,
                             at::ScalarType compute_dtype) {
  const auto opts = at::TensorOptions().dtype(at::kFloat).device(device);
  at::Tensor local;  // This rank's range of flat, or undefined.
  if (flat.defined()) local = flat.narrow(0, shard_begin(), shard_numel_);
  if (offloaded_) {
    // Pinned (page-locked) host memory lets the engine's copies to and from a GPU run
    // asynchronously; pinning needs a CUDA runtime, so a CPU model gets ordinary memory.
    const auto host = at::TensorOptions().dtype(at::kFloat).pinned_memory(device.is_cuda());
    shard_ = at::empty({shard_numel_}, host);
    if (local.defined()) {
      shard_.copy_(local);
    } else {
      shard_.zero_();
    }
    shard_grad_ = at::zeros({shard_numel_}, host);
  } else {
    shard_ = local.defined() ? local.clone() : at::zeros({shard_numel_}, opts);
    shard_grad_ = at::zeros({shard_numel_}, opts);
  }
  if (full_is_shard()) {
    full_ = shard_;
  } else if (flat.defined()) {
    // Allocated now, on the parameters' device, holding the current values (cast under mixed
    // precision); freed below.
    full_ = mixed_ ? flat.to(compute_dtype) : flat;
  } else {
    // Contents undefined until the first gather; allocated so the parameter views can be made.
    full_ = at::empty({padded_numel()}, opts.dtype(compute_dtype));
  }
  full_allocated_ = true;
  for (FlatParamEntry& e : entries_) {
    e.param.set_data(full_.narrow(0, e.offset, e.numel).view(e.shape));
  }
  FreeFull();
}

int64_t FlatParam::valid_shard_numel() const {
  return std::clamp<int64_t>(numel_ - shard_begin(), 0, shard_numel_);
}

void FlatParam::AllocateFull() {
  if (full_allocated_) return;
  c10::StorageImpl* storage = full_.storage().unsafeGetStorageImpl();
  const size_t nbytes = static_cast<size_t>(padded_numel()) * full_.element_size();
  storage->set_data_ptr_noswap(storage->allocator()->allocate(nbytes));
  storage->set_nbytes(nbytes);
  full_allocated_ = true;
}

void FlatParam::FreeFull() {
  if (!full_allocated_ || full_is_shard()) return;
  c10::StorageImpl* storage = full_.storage().unsafeGetStorageImpl();
  storage->set_data_ptr_noswap(c10::DataPtr(nullptr, full_.device()));
  storage->set_nbytes(0);
  full_allocated_ = false;
}

void FlatParam::AllocateFullGrad() {
  if (full_grad_.defined()) return;
  full_grad_ = at::zeros({padded_numel()}, full_.options());
  for (FlatParamEntry& e : entries_) {
    e.param.mutable_grad() = full_grad_.narrow(0, e.offset, e.numel).view(e.shape);
  }
}

void FlatParam::FreeFullGrad() {
  for (FlatParamEntry& e : entries_) e.param.mutable_grad() = at::Tensor();
  full_grad_ = at::Tensor();
}

int64_t FlatParam::shard_bytes() const { return Bytes(shard_); }
int64_t FlatParam::shard_grad_bytes() const { return Bytes(shard_grad_); }
int64_t FlatParam::full_bytes() const {
  return (full_allocated_ && !full_is_shard()) ? Bytes(full_) : 0;
}
int64_t FlatParam::full_grad_bytes() const { return Bytes(full_grad_); }

FlatParam::LocalRange FlatParam::LocalRangeOf(size_t entry_index) const {
  const FlatParamEntry& e = entries_[entry_index];
  const int64_t lo = std::max(e.offset, shard_begin());
  const int64_t hi = std::min(e.offset + e.numel, shard_begin() + shard_numel_);
  LocalRange r;
  if (hi <= lo) return r;
  r.start = lo - e.offset;
  r.end = hi - e.offset;
  r.shard_offset = lo - shard_begin();
  return r;
}

}  // namespace shardline::fsdp
