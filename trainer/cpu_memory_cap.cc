#include "trainer/cpu_memory_cap.h"

#include <atomic>
#include <mutex>
#include <string>
#include <unordered_map>

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

#include "absl/strings/str_format.h"
#include "launch/env_names.h"

namespace shardline::trainer {
namespace {

std::string MiB(int64_t bytes) { return absl::StrFormat("%.1f MiB", bytes / 1048576.0); }

class CappedCpuAllocator;
std::atomic<CappedCpuAllocator*> g_capped{nullptr};

// A DataPtr's context is its data pointer, so that raw_allocate / raw_deallocate work too (the
// TorchScript interpreter's kernels allocate workspace through them, and raw_allocate asserts
// data == context); the base allocation behind each pointer is kept in a table.
class CappedCpuAllocator : public c10::Allocator {
 public:
  CappedCpuAllocator(c10::Allocator* base, int64_t cap) : base_(base), cap_(cap) {}

  c10::DataPtr allocate(size_t n) override {
    const int64_t bytes = static_cast<int64_t>(n);
    const int64_t was = in_use_.fetch_add(bytes);
    if (was + bytes > cap_) {
      in_use_.fetch_sub(bytes);
      TORCH_CHECK_WITH(OutOfMemoryError, false, "CPU memory cap of ", MiB(cap_), " (",
                       launch::kCpuMemoryCapMibEnv, ") exceeded: allocating ", MiB(bytes), " with ",
                       MiB(was), " in use");
    }
    int64_t peak = peak_.load();
    while (was + bytes > peak && !peak_.compare_exchange_weak(peak, was + bytes)) {
    }
    c10::DataPtr inner = base_->allocate(n);
    void* data = inner.get();
    const c10::Device device = inner.device();
    if (data == nullptr) {  // A zero-byte allocation: nothing to track.
      in_use_.fetch_sub(bytes);
      return inner;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      live_.emplace(data, Allocation{std::move(inner), bytes});
    }
    return c10::DataPtr(data, data, &Release, device);
  }

  c10::DeleterFnPtr raw_deleter() const override { return &Release; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

  int64_t in_use() const { return in_use_.load(); }
  int64_t peak() const { return peak_.load(); }

 private:
  struct Allocation {
    c10::DataPtr inner;  // Frees the memory through the base allocator's deleter.
    int64_t bytes;
  };
  static void Release(void* data) {
    CappedCpuAllocator* self = g_capped.load();
    c10::DataPtr inner;  // Freed after the lock is dropped.
    {
      std::lock_guard<std::mutex> lock(self->mu_);
      auto it = self->live_.find(data);
      if (it == self->live_.end()) return;
      self->in_use_.fetch_sub(it->second.bytes);
      inner = std::move(it->second.inner);
      self->live_.erase(it);
    }
  }

  c10::Allocator* base_;
  const int64_t cap_;
  std::atomic<int64_t> in_use_{0};
  std::atomic<int64_t> peak_{0};
  std::mutex mu_;
  std::unordered_map<void*, Allocation> live_;  // Guarded by mu_.
};

}  // namespace

absl::Status InstallCpuMemoryCap(int64_t cap_bytes) {
  if (cap_bytes <= 0) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: the cap must be positive, got %d bytes",
                                                      launch::kCpuMemoryCapMibEnv, cap_bytes));
  }
  if (g_capped.load() != nullptr) {
    return absl::FailedPreconditionError("the CPU memory cap is installed already");
  }
  // Leaked on purpose: storages allocated through it may outlive any owner (static tensors).
  auto* capped = new CappedCpuAllocator(c10::GetCPUAllocator(), cap_bytes);
  g_capped.store(capped);  // Before any allocation through it can be released.
  c10::SetCPUAllocator(capped, /*priority=*/100);
  return absl::OkStatus();
}

int64_t CpuMemoryInUse() {
  CappedCpuAllocator* c = g_capped.load();
  return c == nullptr ? 0 : c->in_use();
}

int64_t CpuMemoryPeak() {
  CappedCpuAllocator* c = g_capped.load();
  return c == nullptr ? 0 : c->peak();
}

}  // namespace shardline::trainer
