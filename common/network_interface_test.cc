#include "common/network_interface.h"

#include "gtest/gtest.h"

namespace shardline {
namespace {

TEST(InterfaceForAddress, LoopbackAddressIsOnTheLoopbackInterface) {
  absl::StatusOr<std::string> name = InterfaceForAddress("127.0.0.1");
  ASSERT_TRUE(name.ok()) << name.status();
  EXPECT_EQ(*name, "lo");
}

TEST(InterfaceForAddress, HostNameIsRefused) {
  absl::StatusOr<std::string> name = InterfaceForAddress("node-1.example");
  EXPECT_EQ(name.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(name.status().message().find("'node-1.example' is not an IP address"),
            std::string::npos)
      << name.status();
}

TEST(InterfaceForAddress, AddressNoInterfaceHoldsIsNotFound) {
  // TEST-NET-3 (RFC 5737): documentation only, never assigned to a host.
  absl::StatusOr<std::string> name = InterfaceForAddress("203.0.113.77");
  EXPECT_EQ(name.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(name.status().message(), "no network interface holds 203.0.113.77");
}

TEST(InterfaceForAddress, WildcardIsNotFound) {
  EXPECT_EQ(InterfaceForAddress("0.0.0.0").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace shardline
