#include "coordinator/core/core_options.h"

#include "absl/strings/str_cat.h"

namespace shardline::coordinator {

absl::Status ValidateCoreOptions(const CoreOptions& options) {
  if (options.clock == nullptr) return absl::InvalidArgumentError("CoreOptions.clock is required");
  if (options.heartbeat_timeout <= options.heartbeat_interval) {
    return absl::InvalidArgumentError(absl::StrCat(
        "heartbeat timeout ", absl::FormatDuration(options.heartbeat_timeout),
        " must exceed the heartbeat interval ", absl::FormatDuration(options.heartbeat_interval)));
  }
  const RendezvousStore::Limits& rdzv = options.rendezvous_limits;
  if (options.max_events_per_job < 1 || options.max_list_page_size < 1 ||
      rdzv.max_keys_per_namespace < 1 || rdzv.max_bytes_per_namespace < 1) {
    return absl::InvalidArgumentError(
        "--max_events_per_job, --max_list_page_size, --rendezvous_max_keys_per_namespace and "
        "--rendezvous_max_bytes_per_namespace must be at least 1");
  }
  // Two: the newest committed step and the one being written.
  if (options.max_checkpoints_per_job < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_checkpoints_per_job ", options.max_checkpoints_per_job, " must be at least 2"));
  }
  if (rdzv.max_response_bytes < rdzv.max_value_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rendezvous_max_response_bytes ", rdzv.max_response_bytes,
                     " must be at least one value's limit (", rdzv.max_value_bytes, " bytes)"));
  }
  return absl::OkStatus();
}

}  // namespace shardline::coordinator
