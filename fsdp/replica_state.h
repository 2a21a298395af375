// Replica-group fault tolerance (docs/failures.md, "Replica-group fault tolerance"): the two
// operations on one rank's model state that the trainer's replica groups need.
//
//   StateDigest            a 64-bit FNV-1a hash of this rank's fp32 parameter shards (valid
//                          elements), its optimizer state slices and the optimizer step count.
//                          Ranks holding the same shard in different replica groups must agree
//                          bit for bit; the value is the same in every process (no pointers, no
//                          seeds), so the coordinator can compare the votes' digests.
//   BroadcastReplicaState  the heal: over a replicate group, the rank `root` sends its parameter
//                          shards, then its optimizer state in LocalState() order, then an int64
//                          progress tensor [optimizer step count, progress...]; every other rank
//                          overwrites its own with them. Afterwards the digests agree.
//   DigestsAgree           on demand, a collective over the replicate group: whether every
//                          member's digest is the same, with one 8-element all-reduce (no
//                          all-gather). The trainer's per-step check sends the digests to the
//                          coordinator with the votes instead (no extra collective in the step,
//                          and the coordinator names the ranks that differ).
//
// Thread safety: training thread only, between steps (nothing gathered or pending).
#ifndef SHARDLINE_FSDP_REPLICA_STATE_H_
#define SHARDLINE_FSDP_REPLICA_STATE_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fsdp/communicator.h"
#include "fsdp/fsdp_engine.h"
#include "fsdp/sharded_optimizer.h"

namespace shardline::fsdp {

// `optimizer` may be null (parameters only). Reads device tensors back to the host.
// Errors: INTERNAL for a LibTorch failure.
absl::StatusOr<uint64_t> StateDigest(const FsdpEngine& engine, const ShardedOptimizer* optimizer);

// A collective over the engine's replicate group (every member calls it): true when every
// member passed the same `digest`. Exact for groups of up to 1024 ranks. Errors: the
// all-reduce's; INVALID_ARGUMENT for a larger group.
absl::StatusOr<bool> DigestsAgree(const FsdpEngine& engine, uint64_t digest);

// A collective over `replicate` (every member calls it with the same root and progress size).
// On the root `progress` is sent; elsewhere it is overwritten, and the optimizer's step count is
// set to the root's. `optimizer` may be null. Errors: INVALID_ARGUMENT for a root outside the
// group; the broadcasts' (UNAVAILABLE / DEADLINE_EXCEEDED naming the group); INTERNAL for a
// LibTorch failure.
absl::Status BroadcastReplicaState(FsdpEngine& engine, ShardedOptimizer* optimizer,
                                   Communicator* replicate, int root,
                                   std::vector<int64_t>* progress);

}  // namespace shardline::fsdp

#endif  // SHARDLINE_FSDP_REPLICA_STATE_H_
