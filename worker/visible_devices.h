// Which GPUs this node's daemon may hand out, and the environment each rank gets for its slot.
//
// A daemon started inside an allocation (Slurm's GPUs 4-7, a container runtime, a user's
// CUDA_VISIBLE_DEVICES) inherits CUDA_VISIBLE_DEVICES naming the GPUs it owns, by index or by
// UUID ("GPU-8f2c...", "MIG-..."). Its slots are those entries, in order, and the rank on slot i
// gets CUDA_VISIBLE_DEVICES=<entry i>: exactly one GPU, the one the allocation gave. Without the
// variable the slots are every GPU the driver lists (/proc/driver/nvidia/gpus), by index.
//
// NCCL's socket transport (bootstrap, and inter-node traffic without InfiniBand) picks its own
// interface unless told; ranks are told the interface that holds the daemon's --address, unless
// the daemon's environment already sets NCCL_SOCKET_IFNAME (the user's choice is inherited).
//
// Thread safety: pure functions.
#ifndef SHARDLINE_WORKER_VISIBLE_DEVICES_H_
#define SHARDLINE_WORKER_VISIBLE_DEVICES_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "launch/rank_env.h"

namespace shardline::worker {

// The value of CUDA_VISIBLE_DEVICES (nullopt: unset) -> its entries. "" and "-1" mean no GPU
// (an empty list). Entries are device indices ("0") or UUIDs ("GPU-...", "MIG-..."), separated
// by commas; spaces around them are ignored. Errors: INVALID_ARGUMENT naming
// CUDA_VISIBLE_DEVICES for an empty entry, a negative or non-numeric index, a "-1" after other
// entries (CUDA would silently drop what follows) or a duplicate.
absl::StatusOr<std::optional<std::vector<std::string>>> ParseVisibleDevices(
    const std::optional<std::string>& value);

// What a rank on a CUDA slot gets in its environment: CUDA_VISIBLE_DEVICES = its slot's entry
// (the inherited entry, or the slot index when nothing was inherited), and NCCL_SOCKET_IFNAME =
// `interface` when `interface` is non-empty and the daemon's own environment has no
// NCCL_SOCKET_IFNAME (`inherited_ifname`). With nothing inherited, also CUDA_DEVICE_ORDER =
// PCI_BUS_ID unless the daemon's environment sets CUDA_DEVICE_ORDER (`inherited_order`): the
// slots are the driver's GPUs in PCI bus order (GpuSlotNames), while CUDA numbers devices fastest
// first by default, so on a node with mixed GPUs slot i would be another model than the one
// registered under its name. Errors: OUT_OF_RANGE when slot_index is not one of the inherited
// entries (the coordinator assigned a slot this daemon never offered).
absl::StatusOr<launch::DeviceEnv> RankDeviceEnv(
    const std::optional<std::vector<std::string>>& inherited, int slot_index,
    const std::string& interface, const std::optional<std::string>& inherited_ifname,
    const std::optional<std::string>& inherited_order);

// The device name of each GPU slot, in slot order. `driver_models` are the models the driver
// lists (/proc/driver/nvidia/gpus, in PCI bus order: CUDA's index order under
// CUDA_DEVICE_ORDER=PCI_BUS_ID). Without an inherited list: one slot per listed GPU. With one:
// one slot per entry, named by the model at that index when the entry is an index the driver
// lists, else by the entry itself (a UUID).
std::vector<std::string> GpuSlotNames(const std::optional<std::vector<std::string>>& inherited,
                                      const std::vector<std::string>& driver_models);

// getenv as an optional (nullopt: unset; "" stays "").
std::optional<std::string> GetEnv(const char* name);

}  // namespace shardline::worker

#endif  // SHARDLINE_WORKER_VISIBLE_DEVICES_H_
