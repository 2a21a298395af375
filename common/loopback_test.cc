#include "common/loopback.h"

#include "gtest/gtest.h"

namespace shardline {
namespace {

TEST(IsLoopbackAddress, RecognisesLoopbackForms) {
  for (const char* a :
       {"127.0.0.1:0", "127.1.2.3:7070", "localhost:7070", "[::1]:7070",
        "unix:/tmp/coordinator.sock", "localhost", "127.0.0.1", "::1", "dns:///localhost:7070",
        "ipv4:127.0.0.1:7070", "[::ffff:127.0.0.1]:7070"}) {
    EXPECT_TRUE(IsLoopbackAddress(a)) << a;
  }
}

TEST(IsLoopbackAddress, RejectsEveryOtherAddress) {
  for (const char* a :
       {"0.0.0.0:7070", "[::]:7070", ":7070", "10.1.2.3:7070", "coordinator.example.com:7070",
        "128.0.0.1:1", "192.0.2.2:7070", "localhost.example.com:7070", "[fd00::2]:7070",
        "dns:///10.0.0.1:1", "127.example.com:7070", "[::ffff:10.0.0.1]:1"}) {
    EXPECT_FALSE(IsLoopbackAddress(a)) << a;
  }
}

}  // namespace
}  // namespace shardline
