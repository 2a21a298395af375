// GlooCommunicator: the Communicator for CPU tensors, on Debian's libgloo over TCP.
//
// Bootstrap: Create() binds a Gloo TCP device to Options::address (or Options::interface) and
// runs gloo::rendezvous::Context::connectFullMesh through an adapter from our KvStore to
// gloo::rendezvous::Store. Every rank of the group must call Create() with the same store
// namespace (wrap the store in a PrefixKvStore per group and attempt) and the same size.
//
// Algorithms (Gloo's own, or Gloo's algorithm on Gloo's transport; no emulation):
//   AllGather      gloo::allgather (ring), on raw bytes: any dtype.
//   ReduceScatter  halving-doubling: each rank sends and receives about (S-1)/S of the buffer,
//                  half of an all-reduce. Power-of-two S: the recursive halving of Gloo's
//                  ReduceScatterHalvingDoubling (same exchanges, same order of additions, so
//                  bit-identical sums) on Gloo's TCP buffers, sending from the caller's tensor;
//                  other S: gloo::ReduceScatterHalvingDoubling itself, on its own working copy
//                  (see gloo_recursive_halving.h for why).
//   AllReduce      gloo::allreduce (ring).
//   Broadcast      gloo::broadcast; Barrier gloo::barrier.
// kAvg is the sum divided by size(). Gloo has no bfloat16 and its float16 sums accumulate in
// half precision, so reductions on bf16/fp16 tensors convert to fp32, reduce, and convert back
// (once, after the whole sum: the result is the fp32 sum rounded once). The algorithm reduces
// in place, so ReduceScatter, which never modifies its input, reduces a working copy;
// ReduceScatterConsuming reduces in the caller's fp32/fp64 input itself in power-of-two groups.
//
// Timeouts: Options::timeout bounds every collective (Gloo's per-op timeout and the pairs'
// timeout). Errors: a timeout is DEADLINE_EXCEEDED, a lost peer UNAVAILABLE, both with the
// message "group <name> op <op> step <step>: " followed by what happened and who is in the
// group ("timed out after 10s (group ranks [0, 1], this is rank 0): <Gloo's text>"; without
// Options::global_ranks, "(this is rank 0 of 2 in the group)"); the communicator is then broken
// and every later call returns FAILED_PRECONDITION. Bad arguments (wrong sizes, dtypes, non-CPU
// tensors) return INVALID_ARGUMENT at once and break nothing, but the other ranks will then time
// out.
//
// Process-wide effect: the first Create() sets SIGPIPE to SIG_IGN if it still has its default
// action, because Gloo writes to sockets without MSG_NOSIGNAL and a dead peer would otherwise
// kill this process instead of producing UNAVAILABLE.
//
// Destruction: runs the queued collectives, then a closing barrier (at most min(timeout, 2s),
// errors ignored, skipped when broken) so that no peer loses the end of the last collective
// when this rank closes its connections.
//
// Thread safety: see communicator.h. All collectives, sync and async, run in issue order on one
// communication thread per communicator; the sync forms enqueue and wait.
#ifndef SHARDLINE_FSDP_GLOO_COMMUNICATOR_H_
#define SHARDLINE_FSDP_GLOO_COMMUNICATOR_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "fsdp/communicator.h"
#include "fsdp/kv_store.h"

namespace shardline::fsdp {

class GlooCommunicator : public Communicator {
 public:
  struct Options {
    std::string name = "world";  // Used in error messages: "world", "shard[1]", ...
    int rank = 0;                // Rank within the group.
    int size = 1;                // Group size (>= 1).
    // Optional: the members' ranks in the whole job, in group-rank order (size entries), named
    // in error messages so a timeout says which processes the group waited on.
    std::vector<int> global_ranks;
    // Bootstrap store, already namespaced for this group (not owned; used only inside Create).
    KvStore* store = nullptr;
    // Address the TCP device binds to and advertises to peers: an IP or a hostname.
    std::string address = "127.0.0.1";
    // If set, bind to this network interface (e.g. "eth0") instead of `address`.
    std::string interface;
    // Bounds bootstrap and every collective.
    absl::Duration timeout = absl::Seconds(60);
    // Reduce-scatter instances kept for reuse, by (size, dtype): each holds receive buffers of
    // ~1x its input in power-of-two groups (plus one working copy of the largest input
    // ReduceScatter had to copy), ~3x in others. 0 builds one per call (slower: see
    // gloo_reduce_scatter_cache.h). Must be equal on all ranks.
    int reduce_scatter_cache_entries = 2;
  };

  // Connects to every peer of the group. Errors: INVALID_ARGUMENT for bad options,
  // DEADLINE_EXCEEDED / UNAVAILABLE if the peers do not all show up within the timeout.
  static absl::StatusOr<std::unique_ptr<GlooCommunicator>> Create(const Options& options);
  ~GlooCommunicator() override;

  int rank() const override;
  int size() const override;
  const std::string& name() const override;
  void set_step(int64_t step) override;
  void Abandon() override;

  absl::Status AllGather(const at::Tensor& in, const at::Tensor& out) override;
  std::unique_ptr<CommHandle> AllGatherAsync(const at::Tensor& in, const at::Tensor& out) override;
  absl::Status ReduceScatter(const at::Tensor& in, const at::Tensor& out, ReduceOp op) override;
  std::unique_ptr<CommHandle> ReduceScatterAsync(const at::Tensor& in, const at::Tensor& out,
                                                 ReduceOp op) override;
  // No copy of `in` in power-of-two groups (fp32/fp64 input): reduces in `in` itself.
  std::unique_ptr<CommHandle> ReduceScatterConsumingAsync(const at::Tensor& in,
                                                          const at::Tensor& out,
                                                          ReduceOp op) override;
  absl::Status AllReduce(const at::Tensor& t, ReduceOp op) override;
  std::unique_ptr<CommHandle> AllReduceAsync(const at::Tensor& t, ReduceOp op) override;
  absl::Status Broadcast(const at::Tensor& t, int root) override;
  absl::Status Barrier() override;

  class Impl;  // gloo_communicator_impl.h (a private header of this library).

 private:
  explicit GlooCommunicator(std::unique_ptr<Impl> impl);
  std::unique_ptr<CommHandle> SubmitReduceScatter(const at::Tensor& in, const at::Tensor& out,
                                                  ReduceOp op, bool consume_input);
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardline::fsdp

#endif  // SHARDLINE_FSDP_GLOO_COMMUNICATOR_H_
