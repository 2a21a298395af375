// CheckCheckpointDirShared: at the start of a job attempt, proves that the job's checkpoint
// directory is one directory seen by every rank, not a node-local path that only looks the same
// (a hostPath, a local disk, a volume mounted on some workers only). Without it, checkpoints
// written there are found missing only at the first restart, or by the coordinator's manifest
// reads, long after the job started.
//
//   1. Rank 0 creates the directory, writes a probe file holding a random nonce and its host
//      name there, and publishes (file name, nonce, host) in the rendezvous store.
//   2. Every rank reads the file back through its own file system (a short retry covers a
//      network file system's lookup cache) and compares the nonce.
//   3. One all-reduce over the world group tells every rank which ranks could not; a rank that
//      could not publishes its host and why, so every rank fails with the same message:
//        checkpoint.dir /ckpt is not shared: rank 3 on host node-b cannot read the probe written
//        by rank 0 on host node-a (...); mount one shared volume at /ckpt on every worker
//   4. Rank 0 removes the probe (after the all-reduce: every rank has read it by then).
//
// Cost: one small file, one store round trip and one all-reduce of world_size floats. Consumes
// no random numbers of the training (the nonce comes from std::random_device), so losses do not
// change.
//
// Errors: INVALID_ARGUMENT with the message above when some rank cannot see the probe (the
// trainer exits kExitCheckpointDirNotShared; a restart would see the same mounts); INTERNAL
// naming rank 0's host and the path when rank 0 cannot create the directory or write the probe
// (every rank returns it); the store's and the collective's errors (DEADLINE_EXCEEDED,
// UNAVAILABLE, FAILED_PRECONDITION) as they are.
//
// Thread safety: call once per rank, from the training thread (a collective).
#ifndef SHARDLINE_TRAINER_CHECKPOINT_DIR_PROBE_H_
#define SHARDLINE_TRAINER_CHECKPOINT_DIR_PROBE_H_

#include <string>

#include <c10/core/Device.h>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "fsdp/communicator.h"
#include "fsdp/kv_store.h"

namespace shardline::trainer {

struct CheckpointDirProbeOptions {
  // Where the probe goes: the job's checkpoint directory (<checkpoint.dir>/<job id> under the
  // coordinator). Created by rank 0 if missing.
  std::string dir;
  // checkpoint.dir as the spec gives it, for the message (the volume to mount).
  std::string configured_dir;
  // This rank's worker (node name), for the message.
  std::string host;
  // Bounds the store wait for rank 0's probe (the collective has its own timeout).
  absl::Duration timeout = absl::Seconds(60);
  // How long a rank keeps looking for a probe it cannot see yet.
  absl::Duration read_retry = absl::Seconds(2);
};

// `store` is this attempt's rendezvous store (keys under "checkpoint_dir_probe/"); `world` is
// the world communicator (its rank and size are this rank's and the job's); the all-reduce's
// tensor lives on `device` (CUDA for NCCL, CPU for Gloo).
absl::Status CheckCheckpointDirShared(const CheckpointDirProbeOptions& options,
                                      fsdp::KvStore* store, fsdp::Communicator* world,
                                      at::Device device);

}  // namespace shardline::trainer

#endif  // SHARDLINE_TRAINER_CHECKPOINT_DIR_PROBE_H_
