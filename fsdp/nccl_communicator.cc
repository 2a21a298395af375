#include "fsdp/nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <utility>
#include <vector>

#include <ATen/ops/empty.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "fsdp/comm_args.h"
#include "fsdp/comm_groups.h"
#include "fsdp/comm_queue.h"
#include "fsdp/comm_watchdog.h"

namespace shardline::fsdp {
namespace {

constexpr char kUniqueIdKey[] = "nccl_unique_id";
// How often synchronous waits poll the done event, and enqueueing polls NCCL's state.
constexpr absl::Duration kPoll = absl::Microseconds(50);
// How often the watchdog polls outstanding collectives: the resolution of their deadlines.
constexpr absl::Duration kWatchdogInterval = absl::Milliseconds(5);

ncclDataType_t NcclType(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return ncclFloat32;
    case at::kBFloat16:
      return ncclBfloat16;
    case at::kHalf:
      return ncclFloat16;
    case at::kDouble:
      return ncclFloat64;
    case at::kLong:
      return ncclInt64;
    default:
      return ncclFloat32;  // Unreachable: comm_args rejects other dtypes first.
  }
}

ncclRedOp_t NcclOp(ReduceOp op) { return op == ReduceOp::kAvg ? ncclAvg : ncclSum; }

std::string NcclError(ncclResult_t r, ncclComm_t comm) {
  const char* last = comm != nullptr ? ncclGetLastError(comm) : nullptr;
  return absl::StrCat(ncclGetErrorString(r), last != nullptr && *last ? ": " : "",
                      last != nullptr ? last : "");
}

// A CUDA event destroyed with its last holder (the handle, the watchdog's poll), on whichever
// thread that is: often the watchdog's, which has no current device of its own. A CUDA runtime
// call there without a guard would initialise a context on device 0, so every rank of a
// torchrun-style launch (all GPUs visible) would hold a second context, and memory, on GPU 0.
struct CudaEvent {
  explicit CudaEvent(int device) : device(device) {}
  const int device;
  cudaEvent_t event = nullptr;
  ~CudaEvent() {
    if (event == nullptr) return;
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
    cudaEventDestroy(event);  // Released once recorded work completes.
  }
};

}  // namespace

class NcclCommunicator::Impl : public std::enable_shared_from_this<Impl> {
 public:
  Impl(Options options, int device, ncclComm_t comm, cudaStream_t stream)
      : options_(std::move(options)),
        device_(device),
        comm_(comm),
        stream_(stream),
        watchdog_(DescribeGroupMembers(options_.global_ranks, options_.rank, options_.size),
                  options_.timeout, WatchdogHooks()) {
    options_.store = nullptr;
    watchdog_.Start(kWatchdogInterval);
  }

  ~Impl() {
    watchdog_.Stop();
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_));
    if (abandoned_.load() && !watchdog_.aborted()) {
      ncclCommAbort(comm_);  // No drain, no finalize: ends kernels stuck on a peer at once.
    } else if (!watchdog_.aborted()) {
      // Outstanding work first, for at most the timeout: a collective stuck on a dead peer
      // would hold cudaStreamSynchronize forever. Then finalize (non-blocking comms finalize
      // asynchronously), also bounded; whatever does not end in time is aborted.
      const absl::Time deadline = absl::Now() + options_.timeout;
      cudaError_t idle = cudaStreamQuery(stream_);
      while (idle == cudaErrorNotReady && absl::Now() < deadline) {
        absl::SleepFor(kPoll);
        idle = cudaStreamQuery(stream_);
      }
      ncclResult_t state = ncclInternalError;
      if (idle == cudaSuccess) {
        state = ncclCommFinalize(comm_);
        while (state == ncclInProgress && absl::Now() < deadline) {
          absl::SleepFor(kPoll);
          ncclCommGetAsyncError(comm_, &state);
        }
      }
      if (state == ncclSuccess) {
        ncclCommDestroy(comm_);
      } else {
        ncclCommAbort(comm_);
      }
    }
    cudaStreamDestroy(stream_);  // Returns at once; released when its work is done.
  }

  const Options& options() const { return options_; }
  // Who the group waits on, for timeout and lost-peer messages (comm_args.h).
  std::string members() const {
    return DescribeGroupMembers(options_.global_ranks, options_.rank, options_.size);
  }
  void set_step(int64_t step) { step_.store(step); }
  void Abandon() { abandoned_.store(true); }
  ncclComm_t comm() const { return comm_; }
  int device() const { return device_; }
  CommWatchdog& watchdog() { return watchdog_; }

  // Issues `call` on the communication stream after the current stream's pending work.
  std::unique_ptr<CommHandle> Launch(absl::string_view op, absl::Status args,
                                     const std::vector<at::Tensor>& tensors,
                                     const std::function<ncclResult_t(cudaStream_t)>& call);

  absl::Status BrokenStatus(const std::string& prefix) const {
    if (abandoned_.load()) {
      return absl::FailedPreconditionError(
          absl::StrCat(prefix, "communicator was abandoned by this rank"));
    }
    const absl::Status failure = watchdog_.failure();
    if (failure.ok()) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat(prefix, "communicator is broken by an earlier error: ", failure.message()));
  }

 private:
  CommWatchdog::Hooks WatchdogHooks() {
    CommWatchdog::Hooks hooks;
    // async_error runs under the watchdog's lock, never after the abort; abort runs once,
    // after the watchdog refuses further WithComm calls (comm_watchdog.h).
    hooks.async_error = [this] {
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      if (async == ncclSuccess || async == ncclInProgress) return std::string();
      return NcclError(async, comm_);
    };
    hooks.abort =
        [this] {  // Ends kernels stuck on a peer. On the watchdog's thread: see CudaEvent.
          c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_));
          ncclCommAbort(comm_);
        };
    return hooks;
  }

  Options options_;
  const int device_;
  ncclComm_t comm_;
  cudaStream_t stream_;
  std::atomic<int64_t> step_{0};
  std::atomic<bool> abandoned_{false};  // Abandon(): abort at teardown, refuse collectives.
  CommWatchdog watchdog_;               // Last: its thread uses the members above.
};

namespace {

class NcclHandle : public CommHandle {
 public:
  NcclHandle(std::shared_ptr<NcclCommunicator::Impl> impl, std::shared_ptr<CommWatchdog::Work> work,
             std::shared_ptr<CudaEvent> done)
      : impl_(std::move(impl)), work_(std::move(work)), done_(std::move(done)) {}

  // Does not block the host: the current stream waits for the done event, and the watchdog
  // enforces the deadline (a failure it finds later shows in AsyncError and later calls).
  absl::Status Wait() override {
    if (!waited_) {
      status_ = impl_->watchdog().StatusOf(*work_);
      if (status_.ok()) {
        c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(impl_->device()));
        cudaStreamWaitEvent(c10::cuda::getCurrentCUDAStream(impl_->device()).stream(), done_->event,
                            0);
      }
      waited_ = true;
    }
    return status_;
  }

  // The synchronous forms: the host waits until the collective finished or the watchdog failed
  // it (at its deadline at the latest), then Wait().
  absl::Status Block() {
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(impl_->device()));
    while (true) {
      if (absl::Status s = impl_->watchdog().StatusOf(*work_); !s.ok()) return s;
      const cudaError_t e = cudaEventQuery(done_->event);
      if (e == cudaSuccess) break;
      if (e != cudaErrorNotReady) {
        return impl_->watchdog().Fail(absl::UnavailableError(
            absl::StrCat(work_->prefix(), "CUDA error: ", cudaGetErrorString(e))));
      }
      absl::SleepFor(kPoll);
    }
    return Wait();
  }

 private:
  std::shared_ptr<NcclCommunicator::Impl> impl_;
  std::shared_ptr<CommWatchdog::Work> work_;
  std::shared_ptr<CudaEvent> done_;
  bool waited_ = false;
  absl::Status status_;
};

// Sync form of an async call: NcclHandle::Block, or the early error of a ReadyHandle.
absl::Status BlockOn(std::unique_ptr<CommHandle> handle) {
  if (auto* nccl = dynamic_cast<NcclHandle*>(handle.get())) return nccl->Block();
  return handle->Wait();
}

}  // namespace

std::unique_ptr<CommHandle> NcclCommunicator::Impl::Launch(
    absl::string_view op, absl::Status args, const std::vector<at::Tensor>& tensors,
    const std::function<ncclResult_t(cudaStream_t)>& call) {
  if (!args.ok()) return std::make_unique<ReadyHandle>(std::move(args));
  const std::string prefix = CommErrorPrefix(options_.name, op, step_.load());
  if (absl::Status b = BrokenStatus(prefix); !b.ok()) return std::make_unique<ReadyHandle>(b);
  for (const at::Tensor& t : tensors) {
    if (t.device().index() != device_) {
      return std::make_unique<ReadyHandle>(absl::InvalidArgumentError(
          absl::StrCat("group ", options_.name, " op ", op, ": tensor on cuda:", t.device().index(),
                       " but the communicator uses cuda:", device_)));
    }
  }
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_));
  cudaStream_t current = c10::cuda::getCurrentCUDAStream(device_).stream();
  cudaEvent_t ready = nullptr;
  auto done = std::make_shared<CudaEvent>(device_);
  if (cudaEventCreateWithFlags(&ready, cudaEventDisableTiming) != cudaSuccess ||
      cudaEventCreateWithFlags(&done->event, cudaEventDisableTiming) != cudaSuccess) {
    if (ready != nullptr) cudaEventDestroy(ready);
    return std::make_unique<ReadyHandle>(
        watchdog_.Fail(absl::UnavailableError(absl::StrCat(prefix, "cudaEventCreate failed"))));
  }
  cudaEventRecord(ready, current);
  cudaStreamWaitEvent(stream_, ready, 0);
  cudaEventDestroy(ready);  // Released once recorded work completes.
  const c10::cuda::CUDAStream comm_stream =
      c10::cuda::getStreamFromExternal(stream_, static_cast<c10::DeviceIndex>(device_));
  for (const at::Tensor& t : tensors) {
    c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), comm_stream);
  }
  const absl::Time deadline = absl::Now() + options_.timeout;
  // Every NCCL call on comm_ goes through WithComm: never concurrent with, nor after, the
  // watchdog's ncclCommAbort (which frees the communicator).
  ncclResult_t r = ncclSuccess;
  std::string error;
  const auto nccl = [&](const std::function<ncclResult_t()>& f) {
    return watchdog_.WithComm([&] {
      r = f();
      if (r != ncclSuccess && r != ncclInProgress) error = NcclError(r, comm_);
      return absl::OkStatus();
    });
  };
  if (!nccl([&] { return call(stream_); }).ok()) {
    return std::make_unique<ReadyHandle>(BrokenStatus(prefix));
  }
  // Non-blocking communicators may still be enqueueing.
  while (r == ncclInProgress) {
    if (absl::Now() > deadline) {
      return std::make_unique<ReadyHandle>(watchdog_.Fail(absl::DeadlineExceededError(
          absl::StrCat(prefix, "timed out after ", absl::FormatDuration(options_.timeout),
                       " enqueueing the collective ", members()))));
    }
    absl::SleepFor(kPoll);
    const bool asked = nccl([&] {
                         ncclResult_t state = ncclSuccess;
                         ncclCommGetAsyncError(comm_, &state);
                         return state;
                       }).ok();
    if (!asked) return std::make_unique<ReadyHandle>(BrokenStatus(prefix));
  }
  if (r != ncclSuccess) {
    return std::make_unique<ReadyHandle>(
        watchdog_.Fail(absl::UnavailableError(absl::StrCat(prefix, "NCCL error: ", error))));
  }
  cudaEventRecord(done->event, stream_);
  const int device = device_;
  std::shared_ptr<CommWatchdog::Work> work =
      watchdog_.Add(prefix, deadline, [done, device](std::string* message) {
        c10::cuda::CUDAGuard poll_guard(static_cast<c10::DeviceIndex>(device));
        const cudaError_t e = cudaEventQuery(done->event);
        if (e == cudaSuccess) return CommWatchdog::PollResult::kDone;
        if (e == cudaErrorNotReady) return CommWatchdog::PollResult::kPending;
        *message = cudaGetErrorString(e);
        return CommWatchdog::PollResult::kError;
      });
  return std::make_unique<NcclHandle>(shared_from_this(), std::move(work), std::move(done));
}

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(const Options& options) {
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size) {
    return absl::InvalidArgumentError(absl::StrCat("group ", options.name, ": rank ", options.rank,
                                                   " is outside a group of size ", options.size));
  }
  if (options.store == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("group ", options.name, ": no store"));
  }
  const std::string prefix = CommErrorPrefix(options.name, "connect", 0);
  int device_count = 0;
  if (cudaGetDeviceCount(&device_count) != cudaSuccess || device_count == 0) {
    return absl::UnavailableError(absl::StrCat(prefix, "no CUDA device"));
  }
  const int device = options.cuda_device >= 0 ? options.cuda_device : c10::cuda::current_device();
  if (device >= device_count) {
    return absl::InvalidArgumentError(absl::StrCat("group ", options.name, ": cuda_device ", device,
                                                   " but only ", device_count, " devices"));
  }
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));

  ncclUniqueId id;
  if (options.rank == 0) {
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) {
      return absl::UnavailableError(
          absl::StrCat(prefix, "ncclGetUniqueId: ", NcclError(r, nullptr)));
    }
    absl::Status s = options.store->Set(
        kUniqueIdKey, absl::string_view(reinterpret_cast<const char*>(&id), sizeof(id)));
    if (!s.ok()) return absl::Status(s.code(), absl::StrCat(prefix, s.message()));
  } else {
    absl::StatusOr<std::vector<std::string>> v =
        options.store->Get({kUniqueIdKey}, options.timeout);
    if (!v.ok()) return absl::Status(v.status().code(), absl::StrCat(prefix, v.status().message()));
    if ((*v)[0].size() != sizeof(id)) {
      return absl::InternalError(
          absl::StrCat(prefix, "unique id of ", (*v)[0].size(), " bytes, expected ", sizeof(id)));
    }
    std::memcpy(&id, (*v)[0].data(), sizeof(id));
  }

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // Lets us poll with a deadline instead of hanging on absent peers.
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&comm, options.size, id, options.rank, &config);
  const absl::Time deadline = absl::Now() + options.timeout;
  while (r == ncclInProgress) {
    if (absl::Now() > deadline) {
      ncclCommAbort(comm);
      return absl::DeadlineExceededError(
          absl::StrCat(prefix, "timed out after ", absl::FormatDuration(options.timeout),
                       " waiting for ", options.size, " ranks to join ",
                       DescribeGroupMembers(options.global_ranks, options.rank, options.size)));
    }
    absl::SleepFor(absl::Milliseconds(1));
    ncclCommGetAsyncError(comm, &r);
  }
  if (r != ncclSuccess) {
    std::string error = NcclError(r, comm);
    if (comm != nullptr) ncclCommAbort(comm);
    return absl::UnavailableError(absl::StrCat(prefix, "ncclCommInitRankConfig: ", error));
  }
  cudaStream_t stream = nullptr;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
    ncclCommAbort(comm);
    return absl::UnavailableError(absl::StrCat(prefix, "cudaStreamCreate failed"));
  }
  return std::unique_ptr<NcclCommunicator>(
      new NcclCommunicator(std::make_shared<Impl>(options, device, comm, stream)));
}

NcclCommunicator::NcclCommunicator(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
NcclCommunicator::~NcclCommunicator() = default;

int NcclCommunicator::rank() const { return impl_->options().rank; }
int NcclCommunicator::size() const { return impl_->options().size; }
const std::string& NcclCommunicator::name() const { return impl_->options().name; }
void NcclCommunicator::set_step(int64_t step) { impl_->set_step(step); }

void NcclCommunicator::Abandon() { impl_->Abandon(); }
absl::Status NcclCommunicator::AsyncError() const { return impl_->watchdog().failure(); }

std::unique_ptr<CommHandle> NcclCommunicator::AllGatherAsync(const at::Tensor& in,
                                                             const at::Tensor& out) {
  return impl_->Launch("all_gather", CheckAllGatherArgs(name(), size(), at::kCUDA, in, out),
                       {in, out}, [&](cudaStream_t stream) {
                         return ncclAllGather(in.data_ptr(), out.data_ptr(), in.numel(),
                                              NcclType(in.scalar_type()), impl_->comm(), stream);
                       });
}

absl::Status NcclCommunicator::AllGather(const at::Tensor& in, const at::Tensor& out) {
  return BlockOn(AllGatherAsync(in, out));
}

std::unique_ptr<CommHandle> NcclCommunicator::ReduceScatterAsync(const at::Tensor& in,
                                                                 const at::Tensor& out,
                                                                 ReduceOp op) {
  return impl_->Launch("reduce_scatter", CheckReduceScatterArgs(name(), size(), at::kCUDA, in, out),
                       {in, out}, [&](cudaStream_t stream) {
                         return ncclReduceScatter(in.data_ptr(), out.data_ptr(), out.numel(),
                                                  NcclType(in.scalar_type()), NcclOp(op),
                                                  impl_->comm(), stream);
                       });
}

absl::Status NcclCommunicator::ReduceScatter(const at::Tensor& in, const at::Tensor& out,
                                             ReduceOp op) {
  return BlockOn(ReduceScatterAsync(in, out, op));
}

std::unique_ptr<CommHandle> NcclCommunicator::ReduceScatterConsumingAsync(const at::Tensor& in,
                                                                          const at::Tensor& out,
                                                                          ReduceOp op) {
  return ReduceScatterAsync(in, out, op);
}

std::unique_ptr<CommHandle> NcclCommunicator::AllReduceAsync(const at::Tensor& t, ReduceOp op) {
  return impl_->Launch("all_reduce", CheckAllReduceArgs(name(), at::kCUDA, t, op == ReduceOp::kAvg),
                       {t}, [&](cudaStream_t stream) {
                         return ncclAllReduce(t.data_ptr(), t.data_ptr(), t.numel(),
                                              NcclType(t.scalar_type()), NcclOp(op), impl_->comm(),
                                              stream);
                       });
}

absl::Status NcclCommunicator::AllReduce(const at::Tensor& t, ReduceOp op) {
  return BlockOn(AllReduceAsync(t, op));
}

absl::Status NcclCommunicator::Broadcast(const at::Tensor& t, int root) {
  return BlockOn(impl_->Launch("broadcast", CheckBroadcastArgs(name(), size(), at::kCUDA, t, root),
                               {t}, [&](cudaStream_t stream) {
                                 return ncclBroadcast(t.data_ptr(), t.data_ptr(), t.numel(),
                                                      NcclType(t.scalar_type()), root,
                                                      impl_->comm(), stream);
                               }));
}

absl::Status NcclCommunicator::Barrier() {
  // NCCL has no barrier: a one-element all-reduce, waited for on the host.
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(impl_->device()));
  at::Tensor one =
      at::empty({1}, at::TensorOptions()
                         .dtype(at::kFloat)
                         .device(at::kCUDA, static_cast<c10::DeviceIndex>(impl_->device())));
  return BlockOn(impl_->Launch("barrier", absl::OkStatus(), {one}, [&](cudaStream_t stream) {
    return ncclAllReduce(one.data_ptr(), one.data_ptr(), 1, ncclFloat32, ncclSum, impl_->comm(),
                         stream);
  }));
}

namespace {

// Makes CreateCommGroups(..., backend = kNccl) use this file (alwayslink target).
const bool kRegistered = RegisterCommBackend(
    CommBackend::kNccl,
    [](const GroupSpec& group,
       const CommOptions& options) -> absl::StatusOr<std::unique_ptr<Communicator>> {
      NcclCommunicator::Options nccl;
      nccl.name = group.name;
      nccl.rank = group.rank;
      nccl.size = group.size;
      nccl.store = group.store;
      nccl.global_ranks = group.ranks;
      nccl.cuda_device = options.cuda_device;
      nccl.timeout = options.timeout;
      // NCCL's sockets follow the configured interface unless the user chose one (setenv
      // without overwrite: NCCL reads the variable when its first communicator initialises).
      if (!options.interface.empty()) {
        setenv("NCCL_SOCKET_IFNAME", options.interface.c_str(), /*overwrite=*/0);
      }
      absl::StatusOr<std::unique_ptr<NcclCommunicator>> comm = NcclCommunicator::Create(nccl);
      if (!comm.ok()) return comm.status();
      return std::unique_ptr<Communicator>(std::move(*comm));
    });

}  // namespace
}  // namespace shardline::fsdp
