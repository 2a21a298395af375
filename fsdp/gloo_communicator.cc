#include "fsdp/gloo_communicator.h"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <exception>
#include <functional>
#include <list>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "fsdp/comm_args.h"
#include "fsdp/comm_queue.h"
#include "gloo/allgather.h"
#include "gloo/allreduce.h"
#include "gloo/barrier.h"
#include "gloo/broadcast.h"
#include "gloo/common/error.h"
#include "gloo/common/logging.h"
#include "gloo/math.h"
#include "gloo/reduce_scatter.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/store.h"
#include "gloo/transport/buffer.h"
#include "gloo/transport/pair.h"
#include "gloo/transport/tcp/device.h"

namespace shardline::fsdp {
namespace {

// Thrown by StoreAdapter through Gloo's rendezvous code (which only knows exceptions) and
// caught again in Create.
class StoreError : public std::runtime_error {
 public:
  explicit StoreError(absl::Status status)
      : std::runtime_error(std::string(status.message())), status_(std::move(status)) {}
  const absl::Status& status() const { return status_; }

 private:
  absl::Status status_;
};

// Lets gloo::rendezvous::Context::connectFullMesh publish and fetch pair addresses in our
// KvStore. Gloo calls wait() before get(), so get() needs no long timeout of its own.
class StoreAdapter : public gloo::rendezvous::Store {
 public:
  StoreAdapter(KvStore* store, absl::Duration timeout) : store_(store), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    absl::Status s = store_->Set(key, absl::string_view(data.data(), data.size()));
    if (!s.ok()) throw StoreError(s);
  }

  std::vector<char> get(const std::string& key) override {
    absl::StatusOr<std::vector<std::string>> values = store_->Get({key}, timeout_);
    if (!values.ok()) throw StoreError(values.status());
    const std::string& v = (*values)[0];
    return std::vector<char>(v.begin(), v.end());
  }

  void wait(const std::vector<std::string>& keys) override { Wait(keys, timeout_); }

  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    Wait(keys, std::min(timeout_, absl::FromChrono(timeout)));
  }

 private:
  void Wait(const std::vector<std::string>& keys, absl::Duration timeout) {
    absl::StatusOr<std::vector<std::string>> values = store_->Get(keys, timeout);
    if (!values.ok()) throw StoreError(values.status());
  }

  KvStore* const store_;
  const absl::Duration timeout_;
};

// Gloo's TCP pairs write without MSG_NOSIGNAL, so a write to a peer that died raises SIGPIPE,
// whose default action kills this process before Gloo can report the error (Python, and so
// PyTorch, ignores SIGPIPE at start-up, which hides this there). Ignore it unless the program
// installed its own handler.
void IgnoreSigpipeOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction current {};
    if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
      signal(SIGPIPE, SIG_IGN);
    }
  });
}

std::chrono::milliseconds ToChrono(absl::Duration d) {
  return std::chrono::milliseconds(absl::ToInt64Milliseconds(d));
}

// comm_args.h's DescribeGroupMembers for these options.
std::string DescribeMembers(const GlooCommunicator::Options& o) {
  return DescribeGroupMembers(o.global_ranks, o.rank, o.size);
}

// Converts the exception being handled (from Gloo, our store adapter or LibTorch) into a
// status whose message starts with `prefix`; `members` is DescribeMembers'. Call only inside a
// catch block.
absl::Status StatusFromCurrentException(const std::string& prefix, absl::Duration timeout,
                                        const std::string& members) {
  try {
    throw;
  } catch (const StoreError& e) {
    return absl::Status(e.status().code(), absl::StrCat(prefix, e.status().message()));
  } catch (const gloo::IoException& e) {
    const std::string what = e.what();
    if (what.find("Timed out") != std::string::npos || what.find("timeout") != std::string::npos) {
      return absl::DeadlineExceededError(absl::StrCat(
          prefix, "timed out after ", absl::FormatDuration(timeout), " ", members, ": ", what));
    }
    return absl::UnavailableError(absl::StrCat(prefix, "lost a peer ", members, ": ", what));
  } catch (const gloo::EnforceNotMet& e) {
    // Gloo reports broken pairs (a peer that died while connecting or mid-operation) through
    // its enforce checks as well as through IoException.
    return absl::UnavailableError(absl::StrCat(prefix, "gloo failed ", members, ": ", e.what()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(prefix, e.what()));
  } catch (...) {
    return absl::InternalError(absl::StrCat(prefix, "unknown exception"));
  }
}

template <typename T>
void GlooAllReduce(const std::shared_ptr<gloo::Context>& context, T* data, size_t n, uint32_t tag,
                   std::chrono::milliseconds timeout) {
  gloo::AllreduceOptions opts(context);
  opts.setOutput(data, n);  // No input: in place.
  opts.setReduceFunction(
      static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<T>));
  opts.setTag(tag);
  opts.setTimeout(timeout);
  gloo::allreduce(opts);
}

// Gloo's halving-doubling reduce-scatter, plus the one thing its run() leaves out: waiting
// until every send it issued has left our memory. run() returns once this rank has its own
// result, but some sends (from a smaller binary block to the larger one when the group size is
// not a power of two) are never acknowledged, so they may still be in flight; `data` is
// freed right after, and a rank that then tears down its pairs cuts its peers off mid-receive.
// The conditions below mirror the ones under which run() sends on each buffer.
template <typename T>
class ReduceScatterAndFlush : public gloo::ReduceScatterHalvingDoubling<T> {
  using Base = gloo::ReduceScatterHalvingDoubling<T>;

 public:
  using Base::Base;

  void RunAndFlush() {
    this->run();
    if (this->contextSize_ == 1) return;
    const int my_rank = this->context_->rank;
    for (uint32_t i = 0; i < this->stepsWithinBlock_; ++i) {
      if (this->sendOffsets_[i] < static_cast<size_t>(this->count_)) {
        this->sendDataBufs_[i]->waitSend();
      }
      this->sendNotificationBufs_[i]->waitSend();
    }
    const size_t total = this->stepsWithinBlock_ > 0
                             ? this->recvCounts_[this->stepsWithinBlock_ - 1]
                             : static_cast<size_t>(this->count_);
    if (this->nextLargerBlockSize_ != 0 && total != 0) {
      for (size_t i = 0; i < this->largerBlockSendDataBufs_.size(); ++i) {
        if (this->sendCountToLargerBlock_ * i < total) {
          this->largerBlockSendDataBufs_[i]->waitSend();
        }
      }
    }
    for (auto& buf : this->distSendDataBufs_) buf->waitSend();
    size_t notify = this->stepsWithinBlock_;
    for (const auto& dist : this->distMapForRecv_) {
      if (dist.rank != my_rank) this->sendNotificationBufs_[notify++]->waitSend();
    }
  }
};

// dst[i] += src[i]: the same IEEE sums as gloo::sum, whose loop GCC leaves scalar at the
// project's -O2 (its operands may alias). Here they cannot, and the loop is vectorized (SSE, no
// runtime dispatch). Not ATen's add_: on this thread it would start its own OpenMP team, which
// competes with the ranks' compute threads for the cores.
template <typename T>
__attribute__((optimize("tree-vectorize"))) void AddInto(T* __restrict dst, const T* __restrict src,
                                                         size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] += src[i];
}

// Recursive-halving reduce-scatter of `count` elements (count = size * n) in a power-of-two
// group, reducing in place in a data buffer given per call: at step k every rank exchanges
// half of its current block with rank ^ 2^k, keeping the half its bit k selects, and adds the
// peer's copy of that half. After log2(size) steps a rank holds the sum of chunk
// bitreverse(rank), which it swaps with that rank (a bit reversal never differs from the
// rank in exactly one bit, so that rank is none of the step peers).
//
// Why not gloo::ReduceScatterHalvingDoubling itself: it binds its send buffers to one data
// pointer at construction, with no way to rebind them (and replacing them is not possible
// either: Gloo's TCP Buffer unregisters its slot on destruction, and its send and receive
// buffers to a peer share one slot), so running it on the caller's tensor means a copy into
// its own buffer first. This is the same algorithm: the same pairs, the same halves, the same
// order of additions (mine + peer's, step by step from the lowest bit), so its sums are
// bit-identical to Gloo's; and the same protocol: receive buffers registered once (a barrier
// after construction, see ReduceScatterCache), data written straight into them, and a
// notification back once consumed, which a sender awaits before it returns, so the next
// call's data never lands in a buffer that is still being read. The difference: the slots are
// per direction, so the send buffers, bound to the caller's tensor, can be made and dropped
// every call without unregistering a receive buffer (unbound buffers, which bind per call too,
// cost a rendezvous round trip per step: 2-3x slower at 1 MiB).
// Memory: about `count` elements of receive buffers (half, quarter, ... and one chunk).
template <typename T>
class RecursiveHalving {
 public:
  RecursiveHalving(const std::shared_ptr<gloo::Context>& context, size_t count)
      : context_(context), count_(count) {
    const int size = context->size;
    const int rank = context->rank;
    steps_ = 0;
    while ((1 << steps_) < size) ++steps_;
    slot_base_ = context->nextSlot((steps_ + 1) * 4);
    const size_t n = count / size;
    // The steps receive count/2 + count/4 + ... + n = count - n elements, the swap n.
    recv_.resize(count);
    size_t offset = 0;
    size_t half = count / 2;
    int holder = 0;
    for (int k = 0; k < steps_; ++k, half /= 2) {
      const int peer = rank ^ (1 << k);
      holder = (holder << 1) | ((rank >> k) & 1);
      auto& pair = context->getPair(peer);
      Phase phase;
      phase.peer = peer;
      phase.recv_offset = offset;
      phase.recv_data =
          pair->createRecvBuffer(Slot(k, peer, rank, 0), &recv_[offset], half * sizeof(T));
      phase.send_notify = pair->createSendBuffer(Slot(k, peer, rank, 1), &dummy_, sizeof(dummy_));
      phase.recv_notify = pair->createRecvBuffer(Slot(k, rank, peer, 1), &dummy_, sizeof(dummy_));
      phases_.push_back(std::move(phase));
      offset += half;
    }
    holder_ = holder;
    if (holder_ != rank) {
      auto& pair = context->getPair(holder_);
      Phase phase;
      phase.peer = holder_;
      phase.recv_offset = offset;
      phase.recv_data =
          pair->createRecvBuffer(Slot(steps_, holder_, rank, 0), &recv_[offset], n * sizeof(T));
      phase.send_notify =
          pair->createSendBuffer(Slot(steps_, holder_, rank, 1), &dummy_, sizeof(dummy_));
      phase.recv_notify =
          pair->createRecvBuffer(Slot(steps_, rank, holder_, 1), &dummy_, sizeof(dummy_));
      phases_.push_back(std::move(phase));
    }
  }

  // Reduces in `data` ([count]: clobbered) and writes this rank's summed chunk to `result`
  // ([count / size], not inside `data`).
  void Run(T* data, T* result) {
    const int rank = context_->rank;
    const size_t n = count_ / context_->size;
    const size_t bytes = count_ * sizeof(T);
    std::vector<std::unique_ptr<gloo::transport::Buffer>> sends;
    sends.reserve(phases_.size());
    size_t begin = 0;
    size_t len = count_;
    for (int k = 0; k < steps_; ++k) {
      Phase& phase = phases_[k];
      const size_t half = len / 2;
      const bool upper = ((rank >> k) & 1) != 0;
      const size_t keep = upper ? begin + half : begin;
      const size_t give = upper ? begin : begin + half;
      sends.push_back(context_->getPair(phase.peer)
                          ->createSendBuffer(Slot(k, rank, phase.peer, 0), data, bytes));
      sends.back()->send(give * sizeof(T), half * sizeof(T));
      phase.recv_data->waitRecv();
      AddInto(data + keep, &recv_[phase.recv_offset], half);
      phase.send_notify->send();
      begin = keep;
      len = half;
    }
    if (holder_ == rank) {
      std::memcpy(result, data + begin, n * sizeof(T));
    } else {
      Phase& phase = phases_.back();
      sends.push_back(context_->getPair(holder_)->createSendBuffer(Slot(steps_, rank, holder_, 0),
                                                                   data, bytes));
      sends.back()->send(begin * sizeof(T), n * sizeof(T));
      phase.recv_data->waitRecv();
      std::memcpy(result, &recv_[phase.recv_offset], n * sizeof(T));
      phase.send_notify->send();
    }
    // Before returning (the caller may free `data`, and the send buffers go now): every send
    // has left, and every peer has consumed what this rank sent it.
    for (auto& send : sends) send->waitSend();
    for (Phase& phase : phases_) {
      phase.send_notify->waitSend();
      phase.recv_notify->waitRecv();
    }
  }

 private:
  struct Phase {
    int peer = 0;
    size_t recv_offset = 0;  // Into recv_.
    std::unique_ptr<gloo::transport::Buffer> recv_data, send_notify, recv_notify;
  };

  // One slot per (phase, direction on the pair, data or notification): a send buffer never
  // shares its slot with a receive buffer on the same pair. Slots are per pair, so the pairs of
  // one phase can share numbers: 4 per phase, whatever the group size.
  int Slot(int phase, int from, int to, int kind) const {
    return slot_base_ + (phase * 2 + (from < to ? 0 : 1)) * 2 + kind;
  }

  std::shared_ptr<gloo::Context> context_;
  const size_t count_;
  int steps_ = 0;
  int slot_base_ = 0;
  int holder_ = 0;  // Bit-reversed rank: who holds this rank's chunk after the steps.
  std::vector<T> recv_;
  int dummy_ = 0;
  std::vector<Phase> phases_;
};

// The reduce-scatter of one communicator: its algorithm instances, kept for reuse, most
// recently used first, by (summing dtype, input size). Used on the communication thread only.
//
// Power-of-two groups run RecursiveHalving in place: in the caller's input when the caller
// consumes it (ReduceScatterConsuming) and it is already in the summing dtype, else in a
// working copy. Other group sizes run gloo::ReduceScatterHalvingDoubling (which handles the
// binary blocks) on its own buffer, so always on a copy. fp64 is summed in fp64, everything
// else (fp32, and bf16/fp16 which Gloo cannot sum well or at all) in fp32, and the result is
// rounded once into `out`.
//
// Why keep instances: both register their receive buffers with the TCP pairs once, as Gloo's
// "old-style" algorithms are meant to be used (construct once, run many times). Data that
// arrives for a buffer not registered yet makes the pair's event loop spin until it is, which
// on a small machine starves the very ranks it waits for (tens of ms per call, measured), and
// each construction allocates receive buffers of about the input's size. FSDP reduce-scatters
// the same few sizes every step (identical blocks share one), so a small cache makes the
// steady state allocation-free. A new instance is followed by a barrier, so every rank has
// registered its buffers before anyone sends. All ranks issue the same sequence of sizes, so
// their caches hit and miss together (the barrier is collective). Memory per entry: about 1x
// its input (power-of-two groups) or 3x (others: work copy + Gloo's two receive buffers); the
// working copy of ReduceScatter (power-of-two groups) is one buffer, grown to the largest
// input. Options::reduce_scatter_cache_entries = 0 keeps nothing.
class ReduceScatterCache {
 public:
  explicit ReduceScatterCache(int capacity) : capacity_(std::max(capacity, 0)) {}

  void Run(const std::shared_ptr<gloo::Context>& context, const at::Tensor& in,
           const at::Tensor& out, ReduceOp op, bool consume_input, uint32_t tag,
           std::chrono::milliseconds timeout) {
    const at::ScalarType wide = in.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
    const int size = context->size;
    const int64_t count = in.numel();
    const int64_t n = out.numel();
    Entry& entry = Find(context, wide, count, n, tag, timeout);
    at::Tensor result;  // [n] in `wide`: this rank's summed chunk.
    if (entry.halving != nullptr) {
      at::Tensor data = in.reshape({-1});
      if (!consume_input || in.scalar_type() != wide) {
        data = Buffer(&work_, count, wide);
        data.copy_(in.reshape({-1}));
      }
      result = out.scalar_type() == wide ? out.view({-1}) : Buffer(&result_, n, wide);
      entry.halving(data.data_ptr(), result.data_ptr());
    } else {
      entry.work.copy_(in.reshape({-1}));
      entry.gloo();
      // With a group size that is not a power of two, the smaller binary block sends its
      // partial sums to the larger one without an acknowledgement, so a fast rank could start
      // the next run of this instance and overwrite a receive buffer its peer has not reduced
      // yet (seen in tests as wrong sums). A barrier closes each run.
      Barrier(context, tag, timeout);
      result = entry.work.narrow(0, 0, n);
    }
    if (op == ReduceOp::kAvg) result.div_(size);
    if (result.data_ptr() != out.data_ptr()) out.view({-1}).copy_(result);
    while (static_cast<int>(entries_.size()) > capacity_) entries_.pop_back();
    if (capacity_ == 0) {
      work_ = at::Tensor();
      result_ = at::Tensor();
    }
  }

 private:
  struct Entry {
    at::ScalarType wide;
    int64_t count;
    std::shared_ptr<void> algorithm;  // RecursiveHalving<T> or ReduceScatterAndFlush<T>.
    // Power-of-two groups: reduce in `data`, this rank's chunk to `result` (both `wide`).
    std::function<void(void* data, void* result)> halving;
    // Other groups: Gloo's instance, on `work`.
    at::Tensor work;
    std::function<void()> gloo;
  };

  static void Barrier(const std::shared_ptr<gloo::Context>& context, uint32_t tag,
                      std::chrono::milliseconds timeout) {
    gloo::BarrierOptions barrier(context);
    barrier.setTag(tag);
    barrier.setTimeout(timeout);
    gloo::barrier(barrier);
  }

  // The first `numel` elements of *buffer, (re)allocated in `dtype` when too small.
  static at::Tensor Buffer(at::Tensor* buffer, int64_t numel, at::ScalarType dtype) {
    if (!buffer->defined() || buffer->scalar_type() != dtype || buffer->numel() < numel) {
      *buffer = at::Tensor();  // Free before allocating the larger one.
      *buffer = at::empty({numel}, at::TensorOptions().dtype(dtype));
    }
    return buffer->narrow(0, 0, numel);
  }

  Entry& Find(const std::shared_ptr<gloo::Context>& context, at::ScalarType wide, int64_t count,
              int64_t chunk, uint32_t tag, std::chrono::milliseconds timeout) {
    auto it = std::find_if(entries_.begin(), entries_.end(),
                           [&](const Entry& e) { return e.wide == wide && e.count == count; });
    if (it != entries_.end()) {
      entries_.splice(entries_.begin(), entries_, it);
      return entries_.front();
    }
    Entry e;
    e.wide = wide;
    e.count = count;
    if (wide == at::kDouble) {
      Build<double>(context, chunk, &e);
    } else {
      Build<float>(context, chunk, &e);
    }
    entries_.push_front(std::move(e));
    Barrier(context, tag, timeout);
    return entries_.front();
  }

  template <typename T>
  static void Build(const std::shared_ptr<gloo::Context>& context, int64_t chunk, Entry* e) {
    const int size = context->size;
    if ((size & (size - 1)) == 0) {
      auto algorithm = std::make_shared<RecursiveHalving<T>>(context, e->count);
      e->halving = [a = algorithm.get()](void* data, void* result) {
        a->Run(static_cast<T*>(data), static_cast<T*>(result));
      };
      e->algorithm = std::move(algorithm);
      return;
    }
    e->work = at::empty({e->count}, at::TensorOptions().dtype(c10::CppTypeToScalarType<T>::value));
    std::vector<int> recv_counts(size, static_cast<int>(chunk));
    auto algorithm = std::make_shared<ReduceScatterAndFlush<T>>(
        context, std::vector<T*>{e->work.data_ptr<T>()}, static_cast<int>(e->count), recv_counts);
    e->gloo = [a = algorithm.get()] { a->RunAndFlush(); };
    e->algorithm = std::move(algorithm);
  }

  const int capacity_;
  std::list<Entry> entries_;
  at::Tensor work_;    // ReduceScatter's working copy (power-of-two groups).
  at::Tensor result_;  // The summed chunk when `out` is not in the summing dtype.
};

}  // namespace

class GlooCommunicator::Impl {
 public:
  Impl(Options options, std::shared_ptr<gloo::transport::Device> device,
       std::shared_ptr<gloo::rendezvous::Context> context)
      : options_(std::move(options)), device_(std::move(device)), context_(std::move(context)) {
    options_.store = nullptr;  // Only valid inside Create.
  }

  ~Impl() {
    // Closing barrier: a rank that tears down its pairs right after its last collective can
    // cut a peer off while that peer still reads the last messages (Gloo's TCP pair raises the
    // peer's EOF even when the data before it already arrived). Once this barrier completes,
    // every peer has finished every earlier collective; errors of the barrier itself are
    // expected at shutdown and ignored. Skipped when broken: a peer is gone anyway.
    bool broken;
    {
      absl::MutexLock lock(&mu_);
      broken = !broken_.ok();
    }
    if (!broken && options_.size > 1) {
      // Short: it only has to cover the tail of the last collective on the other ranks; a rank
      // that is still busy elsewhere has received everything already.
      const auto timeout = ToChrono(std::min(options_.timeout, absl::Seconds(2)));
      Submit("close", absl::OkStatus(),
             [this, timeout](uint32_t tag) {
               gloo::BarrierOptions opts(context_);
               opts.setTag(tag);
               opts.setTimeout(timeout);
               gloo::barrier(opts);
             })
          ->Wait()
          .IgnoreError();
    }
    queue_.reset();  // Join the thread before the context goes.
  }

  const Options& options() const { return options_; }
  void set_step(int64_t step) { step_.store(step); }
  // Broken on purpose: no closing barrier at teardown, no collective after it.
  void Abandon() {
    absl::MutexLock lock(&mu_);
    if (broken_.ok()) {
      broken_ = absl::CancelledError(absl::StrCat(options_.name, ": abandoned by this rank"));
    }
  }

  // Runs `body(tag, timeout)` on the communication thread unless `args` is an error.
  std::unique_ptr<CommHandle> Submit(absl::string_view op, absl::Status args,
                                     std::function<void(uint32_t)> body) {
    if (!args.ok()) return std::make_unique<ReadyHandle>(std::move(args));
    const int64_t step = step_.load();
    std::string prefix = CommErrorPrefix(options_.name, op, step);
    return queue_->Enqueue([this, prefix = std::move(prefix), body = std::move(body)]() {
      {
        absl::MutexLock lock(&mu_);
        if (!broken_.ok()) {
          return absl::FailedPreconditionError(absl::StrCat(
              prefix, "communicator is broken by an earlier error: ", broken_.message()));
        }
      }
      try {
        body(next_tag_++);
        return absl::OkStatus();
      } catch (...) {
        absl::Status status =
            StatusFromCurrentException(prefix, options_.timeout, DescribeMembers(options_));
        absl::MutexLock lock(&mu_);
        broken_ = status;
        return status;
      }
    });
  }

  std::chrono::milliseconds timeout() const { return ToChrono(options_.timeout); }
  const std::shared_ptr<gloo::rendezvous::Context>& context() const { return context_; }
  // Communication thread only.
  ReduceScatterCache& reduce_scatter() { return reduce_scatter_; }

 private:
  Options options_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::rendezvous::Context> context_;
  std::atomic<int64_t> step_{0};
  uint32_t next_tag_ = 0;  // Used on the communication thread only.
  absl::Mutex mu_;
  absl::Status broken_ ABSL_GUARDED_BY(mu_);
  ReduceScatterCache reduce_scatter_{options_.reduce_scatter_cache_entries};
  std::unique_ptr<CommQueue> queue_ = std::make_unique<CommQueue>();
};

absl::StatusOr<std::unique_ptr<GlooCommunicator>> GlooCommunicator::Create(const Options& options) {
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size) {
    return absl::InvalidArgumentError(absl::StrCat("group ", options.name, ": rank ", options.rank,
                                                   " is outside a group of size ", options.size));
  }
  if (!options.global_ranks.empty() &&
      static_cast<int>(options.global_ranks.size()) != options.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("group ", options.name, ": ", options.global_ranks.size(),
                     " global ranks for a group of size ", options.size));
  }
  if (options.store == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("group ", options.name, ": no store"));
  }
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("group ", options.name, ": timeout ",
                                                   absl::FormatDuration(options.timeout),
                                                   " is not positive"));
  }
  const std::string prefix = CommErrorPrefix(options.name, "connect", 0);
  IgnoreSigpipeOnce();
  try {
    gloo::transport::tcp::attr attr;
    if (!options.interface.empty()) {
      attr.iface = options.interface;
    } else {
      attr.hostname = options.address;
    }
    std::shared_ptr<gloo::transport::Device> device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(options.rank, options.size);
    // Set before connecting: each pair copies the context's timeout when it is created, and
    // the pairs' timeout is what bounds the halving-doubling reduce-scatter.
    context->setTimeout(ToChrono(options.timeout));
    StoreAdapter store(options.store, options.timeout);
    context->connectFullMesh(store, device);
    return std::unique_ptr<GlooCommunicator>(
        new GlooCommunicator(std::make_unique<Impl>(options, device, context)));
  } catch (...) {
    return StatusFromCurrentException(prefix, options.timeout, DescribeMembers(options));
  }
}

GlooCommunicator::GlooCommunicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GlooCommunicator::~GlooCommunicator() = default;

int GlooCommunicator::rank() const { return impl_->options().rank; }
int GlooCommunicator::size() const { return impl_->options().size; }
const std::string& GlooCommunicator::name() const { return impl_->options().name; }
void GlooCommunicator::set_step(int64_t step) { impl_->set_step(step); }

void GlooCommunicator::Abandon() { impl_->Abandon(); }

std::unique_ptr<CommHandle> GlooCommunicator::AllGatherAsync(const at::Tensor& in,
                                                             const at::Tensor& out) {
  Impl* impl = impl_.get();
  return impl->Submit(
      "all_gather", CheckAllGatherArgs(name(), size(), at::kCPU, in, out),
      [impl, in, out](uint32_t tag) {
        if (out.numel() == 0) return;
        const auto& context = impl->context();
        gloo::AllgatherOptions opts(context);
        uint8_t* out_ptr = static_cast<uint8_t*>(out.data_ptr());
        const size_t chunk_bytes = in.nbytes();
        // In place when `in` already is this rank's slot of `out` (FSDP gathers that way).
        if (static_cast<uint8_t*>(in.data_ptr()) != out_ptr + context->rank * chunk_bytes) {
          opts.setInput(static_cast<uint8_t*>(in.data_ptr()), chunk_bytes);
        }
        opts.setOutput(out_ptr, out.nbytes());
        opts.setTag(tag);
        opts.setTimeout(impl->timeout());
        gloo::allgather(opts);
      });
}

absl::Status GlooCommunicator::AllGather(const at::Tensor& in, const at::Tensor& out) {
  return AllGatherAsync(in, out)->Wait();
}

std::unique_ptr<CommHandle> GlooCommunicator::ReduceScatterAsync(const at::Tensor& in,
                                                                 const at::Tensor& out,
                                                                 ReduceOp op) {
  return SubmitReduceScatter(in, out, op, /*consume_input=*/false);
}

std::unique_ptr<CommHandle> GlooCommunicator::ReduceScatterConsumingAsync(const at::Tensor& in,
                                                                          const at::Tensor& out,
                                                                          ReduceOp op) {
  return SubmitReduceScatter(in, out, op, /*consume_input=*/true);
}

std::unique_ptr<CommHandle> GlooCommunicator::SubmitReduceScatter(const at::Tensor& in,
                                                                  const at::Tensor& out,
                                                                  ReduceOp op, bool consume_input) {
  Impl* impl = impl_.get();
  return impl->Submit("reduce_scatter", CheckReduceScatterArgs(name(), size(), at::kCPU, in, out),
                      [impl, in, out, op, consume_input](uint32_t tag) {
                        if (out.numel() == 0) return;
                        impl->reduce_scatter().Run(impl->context(), in, out, op, consume_input, tag,
                                                   impl->timeout());
                      });
}

absl::Status GlooCommunicator::ReduceScatter(const at::Tensor& in, const at::Tensor& out,
                                             ReduceOp op) {
  return ReduceScatterAsync(in, out, op)->Wait();
}

std::unique_ptr<CommHandle> GlooCommunicator::AllReduceAsync(const at::Tensor& t, ReduceOp op) {
  Impl* impl = impl_.get();
  const int group_size = size();
  return impl->Submit(
      "all_reduce", CheckAllReduceArgs(name(), at::kCPU, t, op == ReduceOp::kAvg),
      [impl, t, op, group_size](uint32_t tag) {
        if (t.numel() == 0) return;
        const auto& context = impl->context();
        const size_t n = t.numel();
        switch (t.scalar_type()) {
          case at::kDouble:
            GlooAllReduce<double>(context, t.data_ptr<double>(), n, tag, impl->timeout());
            break;
          case at::kLong:
            GlooAllReduce<int64_t>(context, t.data_ptr<int64_t>(), n, tag, impl->timeout());
            break;
          case at::kFloat:
            GlooAllReduce<float>(context, t.data_ptr<float>(), n, tag, impl->timeout());
            break;
          default: {  // bf16 / fp16: sum in fp32, round once.
            at::Tensor wide = t.to(at::kFloat);
            GlooAllReduce<float>(context, wide.data_ptr<float>(), n, tag, impl->timeout());
            if (op == ReduceOp::kAvg) wide.div_(group_size);
            t.copy_(wide);
            return;
          }
        }
        if (op == ReduceOp::kAvg) t.div_(group_size);
      });
}

absl::Status GlooCommunicator::AllReduce(const at::Tensor& t, ReduceOp op) {
  return AllReduceAsync(t, op)->Wait();
}

absl::Status GlooCommunicator::Broadcast(const at::Tensor& t, int root) {
  Impl* impl = impl_.get();
  return impl
      ->Submit("broadcast", CheckBroadcastArgs(name(), size(), at::kCPU, t, root),
               [impl, t, root](uint32_t tag) {
                 if (t.numel() == 0) return;
                 gloo::BroadcastOptions opts(impl->context());
                 opts.setOutput(static_cast<uint8_t*>(t.data_ptr()), t.nbytes());
                 opts.setRoot(root);
                 opts.setTag(tag);
                 opts.setTimeout(impl->timeout());
                 gloo::broadcast(opts);
               })
      ->Wait();
}

absl::Status GlooCommunicator::Barrier() {
  Impl* impl = impl_.get();
  return impl
      ->Submit("barrier", absl::OkStatus(),
               [impl](uint32_t tag) {
                 gloo::BarrierOptions opts(impl->context());
                 opts.setTag(tag);
                 opts.setTimeout(impl->timeout());
                 gloo::barrier(opts);
               })
      ->Wait();
}

}  // namespace shardline::fsdp
