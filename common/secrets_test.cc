#include "common/secrets.h"

#include "gtest/gtest.h"

namespace shardline {
namespace {

TEST(Sha256Hex, MatchesTheStandardTestVector) {
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_TRUE(DigestEquals(Sha256Hex("x"), Sha256Hex("x")));
  EXPECT_FALSE(DigestEquals(Sha256Hex("x"), Sha256Hex("y")));
  EXPECT_FALSE(DigestEquals("ab", "abc"));
}

TEST(RandomSecret, IsThirtyTwoFreshBytesInHex) {
  EXPECT_EQ(RandomSecret().size(), 64u);
  EXPECT_NE(RandomSecret(), RandomSecret());
}

}  // namespace
}  // namespace shardline
