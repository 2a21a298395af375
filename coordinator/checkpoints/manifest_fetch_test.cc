#include "coordinator/checkpoints/manifest_fetch.h"

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

CheckpointInfo Info(const std::string& job, int64_t step, const std::string& path,
                    bool committed = true) {
  CheckpointInfo info;
  info.set_job_id(job);
  info.set_step(step);
  info.set_path(path);
  info.set_committed(committed);
  info.set_created_unix_ms(1000);
  return info;
}

TEST(ManifestCache, ACommittedStepsManifestIsReadOnceThenServedFromTheCache) {
  int reads = 0;
  ManifestCache cache(2, [&reads](const std::string& dir, absl::Duration timeout) {
    ++reads;
    return FetchManifest(dir, timeout);
  });
  const std::string dir = FreshDir("cached");
  std::ofstream(dir + "/MANIFEST.json") << R"({"formatVersion": 1, "step": "30"})";
  for (int i = 0; i < 5; ++i) {
    auto m = cache.Get(Info("job-1", 30, dir), absl::Seconds(5));
    ASSERT_TRUE(m.ok() && m->has_value()) << m.status();
    EXPECT_EQ((*m)->step(), 30);
  }
  EXPECT_EQ(reads, 1);
  // The same step written again (another created time) is read again.
  CheckpointInfo rewritten = Info("job-1", 30, dir);
  rewritten.set_created_unix_ms(2000);
  ASSERT_TRUE(cache.Get(rewritten, absl::Seconds(5)).ok());
  EXPECT_EQ(reads, 2);
  // Uncommitted steps and absent manifests are not cached.
  ASSERT_TRUE(cache.Get(Info("job-1", 40, dir, /*committed=*/false), absl::Seconds(5)).ok());
  ASSERT_TRUE(cache.Get(Info("job-1", 40, dir, /*committed=*/false), absl::Seconds(5)).ok());
  const std::string missing = FreshDir("cached_missing");
  ASSERT_TRUE(cache.Get(Info("job-1", 50, missing), absl::Seconds(5)).ok());
  ASSERT_TRUE(cache.Get(Info("job-1", 50, missing), absl::Seconds(5)).ok());
  EXPECT_EQ(reads, 6);
  EXPECT_EQ(cache.size(), 1u);
}

TEST(ManifestCache, HoldsAtMostItsCapacityDroppingTheOldest) {
  int reads = 0;
  ManifestCache cache(2, [&reads](const std::string&, absl::Duration) {
    ++reads;
    return absl::StatusOr<std::optional<CheckpointManifest>>(CheckpointManifest());
  });
  for (int64_t step = 1; step <= 10; ++step) {
    ASSERT_TRUE(cache.Get(Info("job-1", step, "/ckpt"), absl::Seconds(1)).ok());
  }
  EXPECT_EQ(cache.size(), 2u);
  ASSERT_TRUE(cache.Get(Info("job-1", 10, "/ckpt"), absl::Seconds(1)).ok());  // kept
  EXPECT_EQ(reads, 10);
  ASSERT_TRUE(cache.Get(Info("job-1", 1, "/ckpt"), absl::Seconds(1)).ok());  // dropped
  EXPECT_EQ(reads, 11);
}

}  // namespace
}  // namespace shardline::coordinator
