#include "fsdp/testing/standin_communicator.h"

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <utility>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <ATen/cuda/Sleep.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "absl/strings/str_cat.h"
#include "fsdp/comm_args.h"
#include "fsdp/comm_queue.h"

namespace shardline::fsdp::testing {
namespace {

// cuStreamWaitValue32 / cuStreamWriteValue32 (the CUDA 12 versions, which the runtime hands
// out without linking libcuda).
using StreamValueFn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

struct DriverOps {
  StreamValueFn wait = nullptr;
  StreamValueFn write = nullptr;
};

absl::StatusOr<DriverOps> LoadDriverOps() {
  DriverOps ops;
  for (auto [symbol, fn] :
       {std::pair<const char*, StreamValueFn*>{"cuStreamWaitValue32", &ops.wait},
        {"cuStreamWriteValue32", &ops.write}}) {
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    void* p = nullptr;
    if (cudaGetDriverEntryPointByVersion(symbol, &p, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess || p == nullptr) {
      return absl::UnavailableError(absl::StrCat("the CUDA driver has no ", symbol));
    }
    *fn = reinterpret_cast<StreamValueFn>(p);
  }
  return ops;
}

struct CudaEvent {
  cudaEvent_t event = nullptr;
  CudaEvent() { cudaEventCreateWithFlags(&event, cudaEventDisableTiming); }
  ~CudaEvent() { cudaEventDestroy(event); }
};

// Pairwise sum in rank order: exact for identical inputs on a power-of-two group.
at::Tensor TreeSum(std::vector<at::Tensor> parts) {
  while (parts.size() > 1) {
    std::vector<at::Tensor> next;
    for (size_t i = 0; i + 1 < parts.size(); i += 2) next.push_back(parts[i] + parts[i + 1]);
    if (parts.size() % 2 == 1) next.push_back(parts.back());
    parts = std::move(next);
  }
  return parts[0].clone();
}

}  // namespace

// The group's shared state: the communication stream, the flag, collectives being posted.
class StandInGroup {
 public:
  using Op = StandInCommunicator::Op;

  StandInGroup(std::string name, int size, int64_t delay_cycles, int device, DriverOps ops)
      : name_(std::move(name)),
        size_(size),
        delay_cycles_(delay_cycles),
        device_(device),
        ops_(ops),
        stream_(c10::cuda::getStreamFromPool(/*isHighPriority=*/false,
                                             static_cast<c10::DeviceIndex>(device))),
        next_seq_(size, 0) {
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_));
    flag_ = at::zeros({1}, at::TensorOptions().dtype(at::kInt).device(at::kCUDA, device_));
    c10::cuda::device_synchronize();  // The flag is zero before any stream waits on it.
  }

  const std::string& name() const { return name_; }
  int size() const { return size_; }
  int device() const { return device_; }

  struct Ticket {
    int64_t seq;
    std::shared_ptr<CudaEvent> done;
  };

  // Posts rank's part of its next collective; the last rank to post enqueues it.
  Ticket Post(int rank, Op op, std::vector<at::Tensor> tensors, ReduceOp reduce, int root,
              cudaEvent_t ready) {
    absl::MutexLock lock(&mu_);
    const int64_t seq = next_seq_[rank]++;
    Pending& p = pending_[seq];
    if (p.tensors.empty()) {
      p.op = op;
      p.reduce = reduce;
      p.root = root;
      p.tensors.resize(size_);
      p.ready.resize(size_, nullptr);
      p.done = std::make_shared<CudaEvent>();
    }
    p.tensors[rank] = std::move(tensors);
    p.ready[rank] = ready;
    Ticket ticket{seq, p.done};
    if (++p.posted == size_) {
      EnqueueLocked(seq, p);
      pending_.erase(seq);
      enqueued_ = seq + 1;
    }
    return ticket;
  }

  // Makes `stream` wait for collective `seq`: its done event once enqueued, else the flag.
  // Returns whether it waited on the flag.
  bool WaitOn(cudaStream_t stream, const Ticket& t) {
    absl::MutexLock lock(&mu_);
    if (t.seq < enqueued_) {
      cudaStreamWaitEvent(stream, t.done->event, 0);
      return false;
    }
    ops_.wait(reinterpret_cast<CUstream>(stream), FlagAddress(), static_cast<cuuint32_t>(t.seq + 1),
              CU_STREAM_WAIT_VALUE_GEQ);
    return true;
  }

 private:
  struct Pending {
    Op op = Op::kBarrier;
    ReduceOp reduce = ReduceOp::kSum;
    int root = 0;
    std::vector<std::vector<at::Tensor>> tensors;
    std::vector<cudaEvent_t> ready;
    int posted = 0;
    std::shared_ptr<CudaEvent> done;
  };

  CUdeviceptr FlagAddress() const { return reinterpret_cast<CUdeviceptr>(flag_.data_ptr()); }

  void EnqueueLocked(int64_t seq, Pending& p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_));
    c10::cuda::CUDAStreamGuard on_stream(stream_);  // at:: ops below run on it.
    at::NoGradGuard no_grad;
    for (cudaEvent_t ready : p.ready) {
      cudaStreamWaitEvent(stream_.stream(), ready, 0);
      cudaEventDestroy(ready);  // Released once recorded work completes.
    }
    for (const auto& tensors : p.tensors) {
      for (const at::Tensor& t : tensors) {
        c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), stream_);
      }
    }
    if (delay_cycles_ > 0) at::cuda::sleep(delay_cycles_);
    const int s = size_;
    switch (p.op) {
      case Op::kAllGather:  // tensors[r] = {in, out}
        for (int r = 0; r < s; ++r) {
          const int64_t n = p.tensors[r][0].numel();
          for (int q = 0; q < s; ++q) p.tensors[r][1].narrow(0, q * n, n).copy_(p.tensors[q][0]);
        }
        break;
      case Op::kReduceScatter:  // tensors[r] = {in, out}
        for (int r = 0; r < s; ++r) {
          const int64_t n = p.tensors[r][1].numel();
          std::vector<at::Tensor> parts;
          for (int q = 0; q < s; ++q) parts.push_back(p.tensors[q][0].narrow(0, r * n, n));
          at::Tensor sum = TreeSum(std::move(parts));
          if (p.reduce == ReduceOp::kAvg) sum.div_(s);
          p.tensors[r][1].copy_(sum);
        }
        break;
      case Op::kAllReduce: {  // tensors[r] = {t}
        std::vector<at::Tensor> parts;
        for (int q = 0; q < s; ++q) parts.push_back(p.tensors[q][0]);
        at::Tensor sum = TreeSum(std::move(parts));
        if (p.reduce == ReduceOp::kAvg) sum.div_(s);
        for (int r = 0; r < s; ++r) p.tensors[r][0].copy_(sum);
        break;
      }
      case Op::kBroadcast: {
        at::Tensor src = p.tensors[p.root][0].clone();
        for (int r = 0; r < s; ++r) {
          if (r != p.root) p.tensors[r][0].copy_(src);
        }
        break;
      }
      case Op::kBarrier:
        break;
    }
    cudaEventRecord(p.done->event, stream_.stream());
    ops_.write(reinterpret_cast<CUstream>(stream_.stream()), FlagAddress(),
               static_cast<cuuint32_t>(seq + 1), CU_STREAM_WRITE_VALUE_DEFAULT);
  }

  const std::string name_;
  const int size_;
  const int64_t delay_cycles_;
  const int device_;
  const DriverOps ops_;
  const c10::cuda::CUDAStream stream_;
  at::Tensor flag_;
  absl::Mutex mu_;
  std::vector<int64_t> next_seq_ ABSL_GUARDED_BY(mu_);  // Per rank.
  std::map<int64_t, Pending> pending_ ABSL_GUARDED_BY(mu_);
  int64_t enqueued_ ABSL_GUARDED_BY(mu_) = 0;  // Collectives [0, enqueued_) are enqueued.
};

class StandInHandle : public CommHandle {
 public:
  StandInHandle(std::shared_ptr<StandInGroup> group, StandInGroup::Ticket ticket,
                StandInCommunicator* comm)
      : group_(std::move(group)), ticket_(std::move(ticket)), comm_(comm) {}

  absl::Status Wait() override {
    if (!waited_) {
      c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(group_->device()));
      const cudaStream_t current = c10::cuda::getCurrentCUDAStream(group_->device()).stream();
      if (group_->WaitOn(current, ticket_)) ++comm_->flag_waits_;
      waited_ = true;
    }
    return absl::OkStatus();
  }

 private:
  std::shared_ptr<StandInGroup> group_;
  const StandInGroup::Ticket ticket_;
  StandInCommunicator* comm_;
  bool waited_ = false;
};

absl::StatusOr<std::vector<std::unique_ptr<StandInCommunicator>>> StandInCommunicator::MakeGroup(
    const std::string& name, int size, int64_t delay_cycles) {
  if (c10::cuda::device_count() == 0) return absl::UnavailableError("no CUDA device");
  absl::StatusOr<DriverOps> ops = LoadDriverOps();
  if (!ops.ok()) return ops.status();
  auto group =
      std::make_shared<StandInGroup>(name, size, delay_cycles, c10::cuda::current_device(), *ops);
  std::vector<std::unique_ptr<StandInCommunicator>> comms;
  for (int r = 0; r < size; ++r) {
    comms.push_back(std::unique_ptr<StandInCommunicator>(new StandInCommunicator(group, r)));
  }
  return comms;
}

int StandInCommunicator::size() const { return group_->size(); }
const std::string& StandInCommunicator::name() const { return group_->name(); }

std::unique_ptr<CommHandle> StandInCommunicator::Post(Op op, absl::Status args,
                                                      std::vector<at::Tensor> tensors,
                                                      ReduceOp reduce, int root) {
  if (!args.ok()) return std::make_unique<ReadyHandle>(std::move(args));
  ++collectives_;
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(group_->device()));
  cudaEvent_t ready = nullptr;
  cudaEventCreateWithFlags(&ready, cudaEventDisableTiming);
  cudaEventRecord(ready, c10::cuda::getCurrentCUDAStream(group_->device()).stream());
  StandInGroup::Ticket ticket = group_->Post(rank_, op, std::move(tensors), reduce, root, ready);
  return std::make_unique<StandInHandle>(group_, std::move(ticket), this);
}

absl::Status StandInCommunicator::Finish(std::unique_ptr<CommHandle> handle) {
  absl::Status s = handle->Wait();
  if (!s.ok()) return s;
  // The synchronous forms return once the collective completed (as NcclCommunicator's do).
  const cudaError_t e = cudaStreamSynchronize(c10::cuda::getCurrentCUDAStream().stream());
  if (e != cudaSuccess) return absl::InternalError(cudaGetErrorString(e));
  return absl::OkStatus();
}

std::unique_ptr<CommHandle> StandInCommunicator::AllGatherAsync(const at::Tensor& in,
                                                                const at::Tensor& out) {
  return Post(Op::kAllGather, CheckAllGatherArgs(name(), size(), at::kCUDA, in, out), {in, out},
              ReduceOp::kSum, 0);
}
absl::Status StandInCommunicator::AllGather(const at::Tensor& in, const at::Tensor& out) {
  return Finish(AllGatherAsync(in, out));
}
std::unique_ptr<CommHandle> StandInCommunicator::ReduceScatterAsync(const at::Tensor& in,
                                                                    const at::Tensor& out,
                                                                    ReduceOp op) {
  return Post(Op::kReduceScatter, CheckReduceScatterArgs(name(), size(), at::kCUDA, in, out),
              {in, out}, op, 0);
}
absl::Status StandInCommunicator::ReduceScatter(const at::Tensor& in, const at::Tensor& out,
                                                ReduceOp op) {
  return Finish(ReduceScatterAsync(in, out, op));
}
std::unique_ptr<CommHandle> StandInCommunicator::AllReduceAsync(const at::Tensor& t, ReduceOp op) {
  return Post(Op::kAllReduce, CheckAllReduceArgs(name(), at::kCUDA, t, op == ReduceOp::kAvg), {t},
              op, 0);
}
absl::Status StandInCommunicator::AllReduce(const at::Tensor& t, ReduceOp op) {
  return Finish(AllReduceAsync(t, op));
}
absl::Status StandInCommunicator::Broadcast(const at::Tensor& t, int root) {
  return Finish(Post(Op::kBroadcast, CheckBroadcastArgs(name(), size(), at::kCUDA, t, root), {t},
                     ReduceOp::kSum, root));
}
absl::Status StandInCommunicator::Barrier() {
  return Finish(Post(Op::kBarrier, absl::OkStatus(), {}, ReduceOp::kSum, 0));
}

}  // namespace shardline::fsdp::testing
