#include "fsdp/param_init.h"

#include <utility>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

namespace shardline::fsdp {

InitialValue InitialValue::Fill(std::vector<int64_t> shape, double value) {
  InitialValue v;
  v.shape_ = std::move(shape);
  v.fill_ = value;
  return v;
}

InitialValue InitialValue::Values(at::Tensor values) {
  InitialValue v;
  v.shape_ = values.sizes().vec();
  v.values_ = values.contiguous();
  return v;
}

InitialValue InitialValue::Read(std::vector<int64_t> shape, RangeReader read) {
  InitialValue v;
  v.shape_ = std::move(shape);
  v.read_ = std::move(read);
  return v;
}

int64_t InitialValue::numel() const {
  int64_t n = 1;
  for (int64_t d : shape_) n *= d;
  return n;
}

void InitialValue::CopyRange(int64_t start, int64_t end, const at::Tensor& dst) const {
  at::NoGradGuard no_grad;
  if (read_) {
    read_(start, end, dst);
  } else if (values_.defined()) {
    dst.copy_(values_.view({-1}).narrow(0, start, end - start));
  } else {
    dst.fill_(fill_);
  }
}

void ReleaseTensorStorage(at::Tensor& t) {
  // An empty storage with the tensor's shape: set_sizes_contiguous changes only the metadata, so
  // nothing is allocated (at::empty(shape) would allocate the whole tensor).
  at::Tensor none = at::empty({0}, t.options());
  none.unsafeGetTensorImpl()->set_sizes_contiguous(t.sizes());
  t.set_data(none);
}

void ReleaseParameterStorage(torch::nn::Module& module) {
  for (at::Tensor& p : module.parameters(/*recurse=*/true)) ReleaseTensorStorage(p);
}

bool IsStorageless(const at::Tensor& t) {
  return t.defined() && t.numel() > 0 && t.storage().nbytes() == 0;
}

}  // namespace shardline::fsdp
