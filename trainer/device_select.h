// LocalRankDevice: which visible CUDA device a rank computes on.
//
// LOCAL_RANK indexes the GPUs this process sees: under the worker daemon exactly one
// (CUDA_VISIBLE_DEVICES is the rank's own entry, worker/visible_devices.h) and LOCAL_RANK is
// remapped to it; under torchrun-style launches (srun, torchrun) all of the node's GPUs, one per
// local rank. A LOCAL_RANK beyond the visible devices is an error: wrapping it around (the old
// `local_rank % count`) silently put two ranks on one GPU.
//
// Thread safety: a pure function.
#ifndef SHARDLINE_TRAINER_DEVICE_SELECT_H_
#define SHARDLINE_TRAINER_DEVICE_SELECT_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace shardline::trainer {

// The device index for `local_rank` among `visible_count` CUDA devices. `daemon_launch`: started
// by the worker daemon (SHARDLINE_COORDINATOR set), which shows each rank only its own GPU, so
// one visible device serves any local rank; otherwise local rank i takes device i. Errors:
// FAILED_PRECONDITION naming LOCAL_RANK, the count and `cuda_visible_devices` (quoted when set)
// when local_rank is not below the count; INVALID_ARGUMENT for a negative local_rank.
absl::StatusOr<int> LocalRankDevice(int local_rank, int visible_count,
                                    const std::optional<std::string>& cuda_visible_devices,
                                    bool daemon_launch);

}  // namespace shardline::trainer

#endif  // SHARDLINE_TRAINER_DEVICE_SELECT_H_
