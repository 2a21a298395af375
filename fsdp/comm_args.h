// Argument checks shared by the Communicator backends, so every backend rejects the same
// mistakes with the same INVALID_ARGUMENT message ("group <name> op <op>: ...").
//
// Thread safety: pure functions.
#ifndef SHARDLINE_FSDP_COMM_ARGS_H_
#define SHARDLINE_FSDP_COMM_ARGS_H_

#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace shardline::fsdp {

// "group <name> op <op> step <step>: " — the prefix of every collective error.
std::string CommErrorPrefix(absl::string_view group, absl::string_view op, int64_t step);

// Who a group waits on, for timeout and lost-peer messages: "(group ranks [0, 1], this is rank
// 0)" when `global_ranks` lists the group's `size` members, else "(this is rank 0 of 2 in the
// group)". `rank` is the rank within the group.
std::string DescribeGroupMembers(const std::vector<int>& global_ranks, int rank, int size);

// `device` is at::kCPU or at::kCUDA: the device every tensor must be on.
absl::Status CheckAllGatherArgs(absl::string_view group, int size, at::DeviceType device,
                                const at::Tensor& in, const at::Tensor& out);
absl::Status CheckReduceScatterArgs(absl::string_view group, int size, at::DeviceType device,
                                    const at::Tensor& in, const at::Tensor& out);
absl::Status CheckAllReduceArgs(absl::string_view group, at::DeviceType device, const at::Tensor& t,
                                bool average);
absl::Status CheckBroadcastArgs(absl::string_view group, int size, at::DeviceType device,
                                const at::Tensor& t, int root);

}  // namespace shardline::fsdp

#endif  // SHARDLINE_FSDP_COMM_ARGS_H_
