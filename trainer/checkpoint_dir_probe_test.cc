// CheckCheckpointDirShared with four rank threads, a FileKvStore as their rendezvous store and an
// in-process world group. A rank given another directory than the others stands for a worker
// whose mount at the same path is a different (node-local) file system; the real mount
// namespaces are tested end to end in tests/integration/shared_checkpoint_dir_scenario_test.py.
#include "trainer/checkpoint_dir_probe.h"

#include <dirent.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "fsdp/file_kv_store.h"
#include "fsdp/testing/in_process_communicator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shardline::trainer {
namespace {

using ::testing::HasSubstr;

constexpr int kWorld = 4;

std::string MakeTempDir() {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string templ = std::string(base != nullptr ? base : "/tmp") + "/probe_XXXXXX";
  return mkdtemp(templ.data());
}

std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") out.push_back(name);
  }
  closedir(d);
  return out;
}

// Runs the check on kWorld threads; rank r probes dirs[r] (host "node-<r>").
std::vector<absl::Status> RunRanks(const std::vector<std::string>& dirs) {
  auto store = fsdp::FileKvStore::Create({MakeTempDir()});
  EXPECT_TRUE(store.ok()) << store.status();
  auto world = fsdp::testing::InProcessCommunicator::MakeGroup("world", kWorld);
  std::vector<absl::Status> results(kWorld);
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] {
      CheckpointDirProbeOptions o;
      o.dir = dirs[r];
      o.configured_dir = "/ckpt";
      o.host = absl::StrCat("node-", r);
      o.timeout = absl::Seconds(20);
      o.read_retry = absl::Milliseconds(200);
      results[r] = CheckCheckpointDirShared(o, store->get(), world[r].get(), at::kCPU);
    });
  }
  for (std::thread& t : threads) t.join();
  return results;
}

TEST(CheckCheckpointDirShared, OneDirectoryForEveryRankPassesAndLeavesNoProbe) {
  const std::string job_dir = MakeTempDir() + "/job-a";  // created by rank 0
  const std::vector<absl::Status> results = RunRanks(std::vector<std::string>(kWorld, job_dir));
  for (int r = 0; r < kWorld; ++r) EXPECT_TRUE(results[r].ok()) << "rank " << r << results[r];
  EXPECT_THAT(Entries(job_dir), ::testing::IsEmpty());
}

TEST(CheckCheckpointDirShared, RankWithAnotherDirectoryFailsEveryRankNamingItsHost) {
  const std::string shared = MakeTempDir() + "/job-a";
  const std::string local = MakeTempDir() + "/job-a";  // rank 2's own, empty file system
  std::vector<std::string> dirs(kWorld, shared);
  dirs[2] = local;
  const std::vector<absl::Status> results = RunRanks(dirs);
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_EQ(results[r].code(), absl::StatusCode::kInvalidArgument) << "rank " << r;
    EXPECT_THAT(std::string(results[r].message()),
                HasSubstr("checkpoint.dir /ckpt is not shared: rank 2 on host node-2 cannot read "
                          "the probe written by rank 0 on host node-0 (open " +
                          local + "/.shardline-probe-"))
        << "rank " << r;
    EXPECT_THAT(std::string(results[r].message()),
                HasSubstr("No such file or directory); mount one shared volume at /ckpt on "
                          "every worker"));
    EXPECT_EQ(results[r].message(), results[0].message());  // the same message on every rank
  }
  EXPECT_THAT(Entries(shared), ::testing::IsEmpty());  // rank 0 removed its probe
}

TEST(CheckCheckpointDirShared, SeveralRanksWithoutTheDirectoryAreAllCounted) {
  const std::string shared = MakeTempDir() + "/job-a";
  std::vector<std::string> dirs(kWorld, shared);
  dirs[1] = MakeTempDir() + "/job-a";
  dirs[3] = MakeTempDir() + "/job-a";
  const std::vector<absl::Status> results = RunRanks(dirs);
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_EQ(results[r].code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(results[r].message()),
                HasSubstr("is not shared: rank 1 on host node-1 cannot read"));
    EXPECT_THAT(std::string(results[r].message()), HasSubstr("; 2 of 4 ranks cannot: 1, 3;"));
  }
}

TEST(CheckCheckpointDirShared, UnwritableDirectoryFailsEveryRankNamingRankZerosHost) {
  const std::string base = MakeTempDir();
  std::ofstream(base + "/file") << "not a directory";
  const std::string job_dir = base + "/file/job-a";
  const std::vector<absl::Status> results = RunRanks(std::vector<std::string>(kWorld, job_dir));
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_EQ(results[r].code(), absl::StatusCode::kInternal) << "rank " << r;
    EXPECT_THAT(std::string(results[r].message()),
                HasSubstr("checkpoint.dir /ckpt: rank 0 on host node-0 cannot write the probe " +
                          job_dir + "/.shardline-probe-"));
  }
}

}  // namespace
}  // namespace shardline::trainer
