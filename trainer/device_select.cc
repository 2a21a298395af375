#include "trainer/device_select.h"

#include "absl/strings/str_cat.h"

namespace shardline::trainer {

absl::StatusOr<int> LocalRankDevice(int local_rank, int visible_count,
                                    const std::optional<std::string>& cuda_visible_devices,
                                    bool daemon_launch) {
  if (local_rank < 0) {
    return absl::InvalidArgumentError(absl::StrCat("LOCAL_RANK ", local_rank, " is negative"));
  }
  if (daemon_launch && visible_count == 1) return 0;  // The daemon showed this rank its GPU.
  if (local_rank < visible_count) return local_rank;
  return absl::FailedPreconditionError(absl::StrCat(
      "LOCAL_RANK ", local_rank, " but this trainer sees only ", visible_count,
      " CUDA device(s) (CUDA_VISIBLE_DEVICES ",
      cuda_visible_devices.has_value() ? absl::StrCat("'", *cuda_visible_devices, "'") : "unset",
      "): start at most one rank per visible GPU on this node"));
}

}  // namespace shardline::trainer
