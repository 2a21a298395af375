#include "data/vocab.h"

#include <cstdlib>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace shardline::data {
namespace {

std::string WriteVocab(const std::string& name, const std::string& body) {
  const std::string path = absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
  std::ofstream(path) << body;
  return path;
}

// ids: 0 "a", 1 "b", 2 "ab", 3 "" (special), 4 " ", 5 "abb"
constexpr char kVocab[] = "# shardline token bytes v1\n61\n62\n6162\n\n20\n616262\n";

TEST(TokenVocab, EncodeIsGreedyLongestMatchAndDecodeConcatenates) {
  auto v = TokenVocab::Load(WriteVocab("v", kVocab));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ((*v)->size(), 6);
  auto ids = (*v)->Encode("abba ab");
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(*ids, (std::vector<int64_t>{5, 0, 4, 2}));
  EXPECT_EQ((*v)->Decode(*ids), "abba ab");
  EXPECT_EQ((*v)->Decode({3, 0, 99}), "a?");
}

TEST(TokenVocab, UnknownByteAndBadFilesAreRefusedByName) {
  auto v = TokenVocab::Load(WriteVocab("v2", kVocab));
  ASSERT_TRUE(v.ok());
  auto bad = (*v)->Encode("abc");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("byte 2 starts no token"), std::string::npos);
  auto no_header = TokenVocab::Load(WriteVocab("v3", "61\n"));
  EXPECT_EQ(no_header.status().code(), absl::StatusCode::kInvalidArgument);
  auto bad_hex = TokenVocab::Load(WriteVocab("v4", "# shardline token bytes v1\n6g\n"));
  EXPECT_EQ(bad_hex.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad_hex.status().message().find("line 2"), std::string::npos);
  EXPECT_EQ(TokenVocab::Load("/no/such/vocab").status().code(), absl::StatusCode::kNotFound);
}

TEST(TokenVocab, DecodeForDisplayReplacesInvalidUtf8) {
  auto v = TokenVocab::Load(WriteVocab("v5", "# shardline token bytes v1\nff\n41\n"));
  ASSERT_TRUE(v.ok());
  EXPECT_EQ((*v)->DecodeForDisplay({1, 0}), "A\xEF\xBF\xBD");
}

}  // namespace
}  // namespace shardline::data
