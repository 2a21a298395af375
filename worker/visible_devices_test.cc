#include "worker/visible_devices.h"

#include <map>

#include "gtest/gtest.h"

namespace shardline::worker {
namespace {

using Entries = std::vector<std::string>;
using Env = std::map<std::string, std::string>;

// The variables a DeviceEnv sets, by name.
Env AsEnv(const launch::DeviceEnv& d) {
  Env env;
  if (d.cuda_visible_devices.has_value()) env["CUDA_VISIBLE_DEVICES"] = *d.cuda_visible_devices;
  if (d.cuda_device_order.has_value()) env["CUDA_DEVICE_ORDER"] = *d.cuda_device_order;
  if (d.nccl_socket_ifname.has_value()) env["NCCL_SOCKET_IFNAME"] = *d.nccl_socket_ifname;
  return env;
}

TEST(ParseVisibleDevices, UnsetMeansNoInheritedList) {
  absl::StatusOr<std::optional<Entries>> v = ParseVisibleDevices(std::nullopt);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_FALSE(v->has_value());
}

TEST(ParseVisibleDevices, EmptyAndMinusOneMeanNoGpu) {
  for (const char* none : {"", "-1", " -1 "}) {
    absl::StatusOr<std::optional<Entries>> v = ParseVisibleDevices(std::string(none));
    ASSERT_TRUE(v.ok()) << none << ": " << v.status();
    ASSERT_TRUE(v->has_value()) << none;
    EXPECT_TRUE((*v)->empty()) << none;
  }
}

TEST(ParseVisibleDevices, IndicesKeepTheirOrder) {
  absl::StatusOr<std::optional<Entries>> v = ParseVisibleDevices(std::string("4, 5,7,6"));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(**v, (Entries{"4", "5", "7", "6"}));
}

TEST(ParseVisibleDevices, UuidsAreEntries) {
  absl::StatusOr<std::optional<Entries>> v = ParseVisibleDevices(std::string(
      "GPU-8f2c1e3a-0000-1111-2222-333344445555,MIG-4a1b2c3d-aaaa-bbbb-cccc-ddddeeeeffff"));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(**v, (Entries{"GPU-8f2c1e3a-0000-1111-2222-333344445555",
                          "MIG-4a1b2c3d-aaaa-bbbb-cccc-ddddeeeeffff"}));
}

TEST(ParseVisibleDevices, BadEntriesAreInvalidArgumentNamingTheVariable) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"0,,1", "CUDA_VISIBLE_DEVICES='0,,1': entry '' is empty"},
      {"0,x",
       "CUDA_VISIBLE_DEVICES='0,x': entry 'x' is neither a device index nor a GPU-/MIG- UUID"},
      {"0,-2",
       "CUDA_VISIBLE_DEVICES='0,-2': entry '-2' is neither a device index nor a GPU-/MIG- UUID"},
      {"1,-1,2",
       "CUDA_VISIBLE_DEVICES='1,-1,2': entry '-1' (-1) after other entries: CUDA would ignore the "
       "rest"},
      {"3,3", "CUDA_VISIBLE_DEVICES='3,3': entry '3' appears twice"},
  };
  for (const auto& [value, message] : cases) {
    absl::StatusOr<std::optional<Entries>> v = ParseVisibleDevices(value);
    EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument) << value;
    EXPECT_EQ(v.status().message(), message) << value;
  }
}

TEST(RankDeviceEnv, InheritedListHandsEachSlotItsEntry) {
  const std::optional<Entries> inherited = Entries{"4", "5", "6", "7"};
  for (int slot = 0; slot < 4; ++slot) {
    absl::StatusOr<launch::DeviceEnv> env =
        RankDeviceEnv(inherited, slot, "", std::nullopt, std::nullopt);
    ASSERT_TRUE(env.ok()) << env.status();
    EXPECT_EQ(AsEnv(*env), (Env{{"CUDA_VISIBLE_DEVICES", std::to_string(4 + slot)}}));
  }
}

TEST(RankDeviceEnv, UuidEntryIsHandedOnVerbatim) {
  const std::optional<Entries> inherited = Entries{"GPU-aaaa", "GPU-bbbb"};
  absl::StatusOr<launch::DeviceEnv> env =
      RankDeviceEnv(inherited, 1, "", std::nullopt, std::nullopt);
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(AsEnv(*env).at("CUDA_VISIBLE_DEVICES"), "GPU-bbbb");
}

TEST(RankDeviceEnv, WithoutInheritedListTheSlotIndexIsTheDeviceInPciBusOrder) {
  absl::StatusOr<launch::DeviceEnv> env =
      RankDeviceEnv(std::nullopt, 3, "", std::nullopt, std::nullopt);
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(AsEnv(*env), (Env{{"CUDA_VISIBLE_DEVICES", "3"}, {"CUDA_DEVICE_ORDER", "PCI_BUS_ID"}}));
  // The user's own order is inherited by the rank: the daemon adds nothing.
  env = RankDeviceEnv(std::nullopt, 3, "", std::nullopt, std::string("FASTEST_FIRST"));
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(AsEnv(*env), (Env{{"CUDA_VISIBLE_DEVICES", "3"}}));
}

TEST(RankDeviceEnv, InheritedListKeepsTheDaemonsDeviceOrder) {
  // The inherited indices mean what they meant for the daemon (whose environment, order
  // included, the rank inherits): no CUDA_DEVICE_ORDER is added.
  absl::StatusOr<launch::DeviceEnv> env =
      RankDeviceEnv(Entries{"4", "5"}, 1, "", std::nullopt, std::nullopt);
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(AsEnv(*env), (Env{{"CUDA_VISIBLE_DEVICES", "5"}}));
}

TEST(RankDeviceEnv, SlotOutsideTheInheritedListIsOutOfRange) {
  absl::StatusOr<launch::DeviceEnv> env =
      RankDeviceEnv(Entries{"4", "5"}, 2, "", std::nullopt, std::nullopt);
  EXPECT_EQ(env.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(env.status().message(),
            "slot 2 is not one of this worker's 2 GPU(s) from CUDA_VISIBLE_DEVICES");
}

TEST(RankDeviceEnv, SocketInterfaceFollowsTheWorkerUnlessTheUserSetOne) {
  absl::StatusOr<launch::DeviceEnv> env =
      RankDeviceEnv(std::nullopt, 0, "eth1", std::nullopt, std::nullopt);
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(AsEnv(*env).at("NCCL_SOCKET_IFNAME"), "eth1");
  // The user's own value is inherited by the rank: the daemon adds nothing.
  env = RankDeviceEnv(std::nullopt, 0, "eth1", std::string("ib0"), std::nullopt);
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(AsEnv(*env).count("NCCL_SOCKET_IFNAME"), 0u);
  // No interface holds --address: NCCL picks its own.
  env = RankDeviceEnv(std::nullopt, 0, "", std::nullopt, std::nullopt);
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(AsEnv(*env).count("NCCL_SOCKET_IFNAME"), 0u);
}

TEST(GpuSlotNames, DriverListWithoutInheritedList) {
  EXPECT_EQ(GpuSlotNames(std::nullopt, {"H200", "H200"}), (Entries{"H200", "H200"}));
}

TEST(GpuSlotNames, InheritedIndicesTakeTheDriverModelAndUuidsTheirOwnName) {
  EXPECT_EQ(GpuSlotNames(Entries{"1", "GPU-bbbb", "9"}, {"A100", "H200"}),
            (Entries{"H200", "GPU-bbbb", "9"}));
}

}  // namespace
}  // namespace shardline::worker
