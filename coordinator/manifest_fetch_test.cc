#include "coordinator/manifest_fetch.h"

#include <sys/stat.h>

#include <cstdlib>
#include <fstream>

#include "gtest/gtest.h"

namespace shardline::coordinator {
namespace {

std::string FreshDir(const std::string& name) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  EXPECT_EQ(std::system(("rm -rf " + dir + " && mkdir -p " + dir).c_str()), 0);
  return dir;
}

TEST(FetchManifest, ReadsAValidManifest) {
  const std::string dir = FreshDir("valid");
  std::ofstream(dir + "/MANIFEST.json")
      << R"({"formatVersion": 1, "step": "30", "worldSize": 2, "shardingStrategy": "FULL_SHARD"})";
  auto m = FetchManifest(dir, absl::Seconds(5));
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_TRUE(m->has_value());
  EXPECT_EQ((*m)->step(), 30);
  EXPECT_EQ((*m)->world_size(), 2);
}

TEST(FetchManifest, MissingInvalidOrOtherVersionGivesNoManifest) {
  EXPECT_FALSE(FetchManifest(FreshDir("missing"), absl::Seconds(5))->has_value());
  const std::string bad = FreshDir("bad");
  std::ofstream(bad + "/MANIFEST.json") << "{not json";
  EXPECT_FALSE(FetchManifest(bad, absl::Seconds(5))->has_value());
  const std::string v2 = FreshDir("v2");
  std::ofstream(v2 + "/MANIFEST.json") << R"({"formatVersion": 2, "step": "30"})";
  EXPECT_FALSE(FetchManifest(v2, absl::Seconds(5))->has_value());
}

TEST(FetchManifest, RefusesAFifoWithoutBlocking) {
  const std::string dir = FreshDir("fifo");
  ASSERT_EQ(::mkfifo((dir + "/MANIFEST.json").c_str(), 0600), 0);
  auto m = FetchManifest(dir, absl::Seconds(5));
  EXPECT_EQ(m.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(m.status().message(), dir + "/MANIFEST.json is not a regular file (a FIFO); not read");
}

}  // namespace
}  // namespace shardline::coordinator
