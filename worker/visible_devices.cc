#include "worker/visible_devices.h"

#include <cstdlib>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace shardline::worker {

absl::StatusOr<std::optional<std::vector<std::string>>> ParseVisibleDevices(
    const std::optional<std::string>& value) {
  if (!value.has_value()) return std::optional<std::vector<std::string>>();
  std::vector<std::string> entries;
  const absl::string_view all = absl::StripAsciiWhitespace(*value);
  if (all.empty() || all == "-1") return std::optional<std::vector<std::string>>(entries);
  std::set<std::string> seen;
  for (absl::string_view raw : absl::StrSplit(all, ',')) {
    const std::string entry(absl::StripAsciiWhitespace(raw));
    const auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(
          absl::StrCat("CUDA_VISIBLE_DEVICES='", *value, "': entry '", entry, "' ", why));
    };
    if (entry.empty()) return bad("is empty");
    if (entry == "-1") return bad("(-1) after other entries: CUDA would ignore the rest");
    if (!absl::StartsWith(entry, "GPU-") && !absl::StartsWith(entry, "MIG-")) {
      int index = -1;
      if (!absl::SimpleAtoi(entry, &index) || index < 0) {
        return bad("is neither a device index nor a GPU-/MIG- UUID");
      }
    }
    if (!seen.insert(entry).second) return bad("appears twice");
    entries.push_back(entry);
  }
  return std::optional<std::vector<std::string>>(entries);
}

absl::StatusOr<launch::DeviceEnv> RankDeviceEnv(
    const std::optional<std::vector<std::string>>& inherited, int slot_index,
    const std::string& interface, const std::optional<std::string>& inherited_ifname,
    const std::optional<std::string>& inherited_order) {
  launch::DeviceEnv env;
  if (inherited.has_value()) {
    if (slot_index < 0 || slot_index >= static_cast<int>(inherited->size())) {
      return absl::OutOfRangeError(absl::StrCat("slot ", slot_index,
                                                " is not one of this worker's ", inherited->size(),
                                                " GPU(s) from CUDA_VISIBLE_DEVICES"));
    }
    env.cuda_visible_devices = (*inherited)[slot_index];
  } else {
    env.cuda_visible_devices = std::to_string(slot_index);
    if (!inherited_order.has_value()) env.cuda_device_order = "PCI_BUS_ID";
  }
  if (!interface.empty() && !inherited_ifname.has_value()) env.nccl_socket_ifname = interface;
  return env;
}

std::vector<std::string> GpuSlotNames(const std::optional<std::vector<std::string>>& inherited,
                                      const std::vector<std::string>& driver_models) {
  if (!inherited.has_value()) return driver_models;
  std::vector<std::string> names;
  for (const std::string& entry : *inherited) {
    int index = -1;
    const bool listed = absl::SimpleAtoi(entry, &index) && index >= 0 &&
                        index < static_cast<int>(driver_models.size());
    names.push_back(listed ? driver_models[index] : entry);
  }
  return names;
}

std::optional<std::string> GetEnv(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return std::nullopt;
  return std::string(v);
}

}  // namespace shardline::worker
