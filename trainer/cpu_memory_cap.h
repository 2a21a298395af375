// CPU memory cap: a counting wrapper around LibTorch's CPU allocator that refuses an allocation
// which would take the bytes in use past a cap, as a process with less host memory would fail.
// It lets a test show what sharded initialization buys on one machine: a model larger than the
// cap trains at W = 4 FULL_SHARD and fails at W = 1 (trainer/sharded_init_memory_test.sh).
//
//   SHARDLINE_CPU_MEMORY_CAP_MIB=40 trainer --spec ...   (read with the launch environment,
//                                                          launch/rank_env.h; trainer_main.cc
//                                                          installs it)
//
// It counts tensors' host memory only (c10::GetCPUAllocator: parameters, shards, gradients,
// optimizer state, activations, host staging buffers); memory LibTorch or Gloo take from malloc
// directly, and CUDA memory, are not counted. A refused allocation throws c10::OutOfMemoryError
// naming the cap, the request and the bytes in use; common/torch_status.h turns it into
// RESOURCE_EXHAUSTED.
//
// Thread safety: the counters are atomic; install once, before the first tensor, from main().
#ifndef SHARDLINE_TRAINER_CPU_MEMORY_CAP_H_
#define SHARDLINE_TRAINER_CPU_MEMORY_CAP_H_

#include <cstdint>

#include "absl/status/status.h"

namespace shardline::trainer {

// Installs the cap (process-wide, for the rest of the process; memory allocated before is not
// counted): call first thing in main, before any tensor exists. Errors: INVALID_ARGUMENT for
// cap_bytes <= 0; FAILED_PRECONDITION when installed already.
absl::Status InstallCpuMemoryCap(int64_t cap_bytes);

// Bytes in use through the capped allocator, and the most ever in use (0 without a cap).
int64_t CpuMemoryInUse();
int64_t CpuMemoryPeak();

}  // namespace shardline::trainer

#endif  // SHARDLINE_TRAINER_CPU_MEMORY_CAP_H_
