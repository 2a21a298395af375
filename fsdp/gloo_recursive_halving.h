// RecursiveHalving: the reduce-scatter GlooCommunicator runs in power-of-two groups, on Gloo's
// TCP pairs. Implementation of GlooCommunicator, not for other callers (Bazel-private to
// //fsdp); ReduceScatterCache (gloo_reduce_scatter_cache.h) builds and keeps the instances.
//
// Thread safety: an instance runs on one thread at a time (the communication thread).
#ifndef SHARDLINE_FSDP_GLOO_RECURSIVE_HALVING_H_
#define SHARDLINE_FSDP_GLOO_RECURSIVE_HALVING_H_

#include <cstddef>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "gloo/context.h"
#include "gloo/transport/buffer.h"
#include "gloo/transport/pair.h"

namespace shardline::fsdp::gloo_internal {

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
      holder = (holder << 1) | ((rank >> k) & 1);
      AddPhase(k, rank ^ (1 << k), offset, half);
      offset += half;
    }
    holder_ = holder;
    if (holder_ != rank) AddPhase(steps_, holder_, offset, n);  // the swap
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

  // Registers phase `k`'s receive buffers with `peer`: `elements` of data at recv_[offset], and
  // the notifications both ways.
  void AddPhase(int k, int peer, size_t offset, size_t elements) {
    const int rank = context_->rank;
    auto& pair = context_->getPair(peer);
    Phase phase;
    phase.peer = peer;
    phase.recv_offset = offset;
    phase.recv_data =
        pair->createRecvBuffer(Slot(k, peer, rank, 0), &recv_[offset], elements * sizeof(T));
    phase.send_notify = pair->createSendBuffer(Slot(k, peer, rank, 1), &dummy_, sizeof(dummy_));
    phase.recv_notify = pair->createRecvBuffer(Slot(k, rank, peer, 1), &dummy_, sizeof(dummy_));
    phases_.push_back(std::move(phase));
  }

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

}  // namespace shardline::fsdp::gloo_internal

#endif  // SHARDLINE_FSDP_GLOO_RECURSIVE_HALVING_H_
