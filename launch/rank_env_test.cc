#include "launch/rank_env.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>

#include "launch/env_names.h"

namespace shardline::launch {
namespace {

using Env = std::map<std::string, std::string>;

std::function<const char*(const char*)> FakeEnv(Env vars) {
  auto shared = std::make_shared<Env>(std::move(vars));
  return [shared](const char* name) -> const char* {
    auto it = shared->find(name);
    return it == shared->end() ? nullptr : it->second.c_str();
  };
}

// What the worker daemon hands a CUDA rank of a coordinator job, with every field set.
RankEnv DaemonRank() {
  RankEnv e;
  e.rank = 3;
  e.world_size = 4;
  e.local_rank = 1;
  e.local_world_size = 2;
  e.master_addr = "10.0.0.7";
  e.coordinator = "coord:7070";
  e.job_id = "job-mi5x3k2aq7zp";
  e.attempt = 2;
  e.rdzv_namespace = "job-mi5x3k2aq7zp/2";
  e.rdzv_secret = "s3cret";
  e.resume_step = 40;
  e.resume_from_job = "job-older";
  e.rank_generation = 1;
  e.advertise_address = "10.0.0.8";
  e.node_name = "node-b";
  e.open_roots = {"/data", "/ckpt"};
  e.write_roots = {"/ckpt"};
  e.device = {"GPU-8f2c", "PCI_BUS_ID", "eth1"};
  return e;
}

TEST(RankEnv, DaemonRankRoundTripsThroughTheEnvironment) {
  absl::StatusOr<Env> written = WriteRankEnv(DaemonRank());
  ASSERT_TRUE(written.ok()) << written.status();
  absl::StatusOr<RankEnv> e = ReadRankEnv(FakeEnv(*written));
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->rank, 3);
  EXPECT_EQ(e->world_size, 4);
  EXPECT_EQ(e->local_rank, 1);
  EXPECT_EQ(e->local_world_size, 2);
  EXPECT_EQ(e->master_addr, "10.0.0.7");
  EXPECT_EQ(e->master_port, 0);
  EXPECT_EQ(e->coordinator, "coord:7070");
  EXPECT_EQ(e->job_id, "job-mi5x3k2aq7zp");
  EXPECT_EQ(e->attempt, 2);
  EXPECT_EQ(e->rdzv_namespace, "job-mi5x3k2aq7zp/2");
  EXPECT_EQ(e->rdzv_secret, "s3cret");
  EXPECT_EQ(e->resume_step, std::optional<int64_t>(40));
  EXPECT_EQ(e->resume_from_job, "job-older");
  EXPECT_EQ(e->rank_generation, 1);
  EXPECT_EQ(e->advertise_address, "10.0.0.8");
  EXPECT_EQ(e->node_name, "node-b");
  EXPECT_EQ(e->open_roots, (std::vector<std::string>{"/data", "/ckpt"}));
  EXPECT_EQ(e->write_roots, (std::vector<std::string>{"/ckpt"}));
  EXPECT_EQ(e->device.cuda_visible_devices, "GPU-8f2c");
  EXPECT_EQ(e->device.cuda_device_order, "PCI_BUS_ID");
  EXPECT_EQ(e->device.nccl_socket_ifname, "eth1");
  EXPECT_EQ(e->store_secret, "");
  EXPECT_FALSE(e->store_insecure);
  EXPECT_FALSE(e->torchelastic_agent_store);
  EXPECT_EQ(e->peak_flops, std::nullopt);
  EXPECT_EQ(e->cpu_memory_cap_mib, std::nullopt);
  // Written again, the same entries: nothing is lost or changed on the way.
  EXPECT_EQ(*WriteRankEnv(*e), *written);
}

TEST(RankEnv, StandaloneSettingsRoundTripExactly) {
  RankEnv in;
  in.rank = 1;
  in.world_size = 2;
  in.local_rank = 1;
  in.master_addr = "127.0.0.1";
  in.master_port = 29500;
  in.store_secret = "abc";
  in.store_insecure = true;
  in.torchelastic_agent_store = true;
  in.peak_flops = 989e12;
  in.cpu_memory_cap_mib = 64.1;
  absl::StatusOr<Env> written = WriteRankEnv(in);
  ASSERT_TRUE(written.ok()) << written.status();
  absl::StatusOr<RankEnv> e = ReadRankEnv(FakeEnv(*written));
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->master_port, 29500);
  EXPECT_EQ(e->store_secret, "abc");
  EXPECT_TRUE(e->store_insecure);
  EXPECT_TRUE(e->torchelastic_agent_store);
  EXPECT_EQ(e->peak_flops, std::optional<double>(989e12));
  EXPECT_EQ(e->cpu_memory_cap_mib, std::optional<double>(64.1));  // exactly: 17 digits
  EXPECT_EQ(e->resume_step, std::nullopt);
}

TEST(WriteRankEnv, DaemonVariablesAreWrittenEvenEmptyAndUnsetOnesNot) {
  // Empty values are written so that the daemon's own environment cannot show through; unset
  // optional ones are not, so that an operator's value on the daemon reaches its trainers.
  absl::StatusOr<Env> written = WriteRankEnv(RankEnv());
  ASSERT_TRUE(written.ok()) << written.status();
  for (const char* name :
       {kRankEnv, kWorldSizeEnv, kLocalRankEnv, kLocalWorldSizeEnv, kMasterAddrEnv, kCoordinatorEnv,
        kJobIdEnv, kAttemptEnv, kRdzvNamespaceEnv, kRdzvSecretEnv, kResumeFromJobEnv,
        kRankGenerationEnv, kAdvertiseAddressEnv, kNodeNameEnv}) {
    EXPECT_EQ(written->count(name), 1u) << name;
  }
  EXPECT_EQ(written->at(kWorldSizeEnv), "1");
  EXPECT_EQ(written->at(kCoordinatorEnv), "");
  for (const char* name :
       {kResumeStepEnv, kOpenRootsEnv, kCudaVisibleDevicesEnv, kCudaDeviceOrderEnv,
        kNcclSocketIfnameEnv, kMasterPortEnv, kStoreSecretEnv, kStoreInsecureEnv,
        kTorchElasticAgentStoreEnv, kPeakFlopsEnv, kCpuMemoryCapMibEnv}) {
    EXPECT_EQ(written->count(name), 0u) << name;
  }
  // Resume step 0 (the registry holds none of the job's own) is a value, not "unset".
  RankEnv fresh;
  fresh.resume_step = 0;
  EXPECT_EQ(WriteRankEnv(fresh)->at(kResumeStepEnv), "0");
}

TEST(WriteRankEnv, RefusesWhatTheReaderWouldRefuseOrReadOtherwise) {
  RankEnv e = DaemonRank();
  e.rank = 4;
  absl::StatusOr<Env> written = WriteRankEnv(e);
  EXPECT_EQ(written.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(written.status().message(), "environment RANK=4 is not in [0, WORLD_SIZE=4)");
  e = DaemonRank();
  e.open_roots = {"/data,/etc"};
  written = WriteRankEnv(e);
  EXPECT_EQ(written.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(written.status().message(),
            "environment SHARDLINE_OPEN_ROOTS=\"/data,/etc\" holds a ',', which separates the "
            "roots");
}

TEST(ReadRankEnv, NothingSetIsOneProcess) {
  absl::StatusOr<RankEnv> e = ReadRankEnv(FakeEnv({}));
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->rank, 0);
  EXPECT_EQ(e->world_size, 1);
  EXPECT_EQ(e->local_rank, 0);
  EXPECT_EQ(e->resume_step, std::nullopt);
  EXPECT_EQ(e->rank_generation, 0);
  EXPECT_TRUE(e->open_roots.empty());
  EXPECT_EQ(e->device.cuda_visible_devices, std::nullopt);
}

TEST(ReadRankEnv, LocalRankDefaultsToRankAndEmptyMeansUnset) {
  absl::StatusOr<RankEnv> e =
      ReadRankEnv(FakeEnv({{"RANK", "2"}, {"WORLD_SIZE", "4"}, {"SHARDLINE_RESUME_STEP", ""}}));
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->local_rank, 2);
  EXPECT_EQ(e->resume_step, std::nullopt);
  // LOCAL_RANK is checked against LOCAL_WORLD_SIZE only when the launcher set it.
  e = ReadRankEnv(FakeEnv({{"RANK", "2"}, {"WORLD_SIZE", "4"}, {"LOCAL_WORLD_SIZE", "1"}}));
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->local_rank, 2);
  EXPECT_EQ(e->local_world_size, 1);
}

// Each malformed value is refused with INVALID_ARGUMENT naming the variable and the value.
TEST(ReadRankEnv, RefusesEachMalformedValueNamingTheVariableAndValue) {
  const Env two = {{"RANK", "0"}, {"WORLD_SIZE", "2"}};
  auto with = [&two](Env extra) {
    Env e = two;
    for (auto& [k, v] : extra) e[k] = v;
    return e;
  };
  const std::vector<std::pair<Env, std::string>> cases = {
      {{{"RANK", "x"}, {"WORLD_SIZE", "2"}}, "environment RANK=\"x\" is not an integer"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2x"}}, "environment WORLD_SIZE=\"2x\" is not an integer"},
      {{{"RANK", "0"}},
       "environment: RANK and WORLD_SIZE must be set together (or neither, for "
       "one process)"},
      {{{"WORLD_SIZE", "2"}},
       "environment: RANK and WORLD_SIZE must be set together (or "
       "neither, for one process)"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "0"}}, "environment WORLD_SIZE=0 must be >= 1"},
      {{{"RANK", "4"}, {"WORLD_SIZE", "4"}}, "environment RANK=4 is not in [0, WORLD_SIZE=4)"},
      {{{"RANK", "-1"}, {"WORLD_SIZE", "4"}}, "environment RANK=-1 is not in [0, WORLD_SIZE=4)"},
      {with({{"LOCAL_RANK", "one"}}), "environment LOCAL_RANK=\"one\" is not an integer"},
      {with({{"LOCAL_RANK", "-1"}}), "environment LOCAL_RANK=-1 is negative"},
      {with({{"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}}),
       "environment LOCAL_RANK=2 is not in [0, LOCAL_WORLD_SIZE=2)"},
      {with({{"LOCAL_WORLD_SIZE", "n"}}), "environment LOCAL_WORLD_SIZE=\"n\" is not an integer"},
      {with({{"MASTER_PORT", "http"}}), "environment MASTER_PORT=\"http\" is not an integer"},
      {with({{"MASTER_PORT", "70000"}}), "environment MASTER_PORT=70000 is not a TCP port"},
      {with({{"MASTER_PORT", "0"}}), "environment MASTER_PORT=0 is not a TCP port"},
      {with({{"SHARDLINE_ATTEMPT", "1st"}}),
       "environment SHARDLINE_ATTEMPT=\"1st\" is not an integer"},
      {with({{"SHARDLINE_ATTEMPT", "-2"}}), "environment SHARDLINE_ATTEMPT=-2 is negative"},
      {with({{"SHARDLINE_RESUME_STEP", "4x"}}),
       "environment SHARDLINE_RESUME_STEP=\"4x\" is not an integer"},
      {with({{"SHARDLINE_RESUME_STEP", "-1"}}), "environment SHARDLINE_RESUME_STEP=-1 is negative"},
      {with({{"SHARDLINE_RANK_GENERATION", "-1"}}),
       "environment SHARDLINE_RANK_GENERATION=-1 is negative"},
      {with({{"SHARDLINE_RANK_GENERATION", "g2"}}),
       "environment SHARDLINE_RANK_GENERATION=\"g2\" is not an integer"},
      {with({{"SHARDLINE_OPEN_ROOTS", "/data,ckpt"}}),
       "environment SHARDLINE_OPEN_ROOTS: root \"ckpt\" is not an absolute path"},
      {with({{"SHARDLINE_WRITE_ROOTS", "ckpt"}}),
       "environment SHARDLINE_WRITE_ROOTS: root \"ckpt\" is not an absolute path"},
      {with({{"SHARDLINE_STORE_INSECURE", "yes"}}),
       "environment SHARDLINE_STORE_INSECURE=\"yes\" is not 1 or 0"},
      {with({{"TORCHELASTIC_USE_AGENT_STORE", "true"}}),
       "environment TORCHELASTIC_USE_AGENT_STORE=\"true\" is not True or False"},
      {with({{"SHARDLINE_PEAK_FLOPS", "1e15x"}}),
       "environment SHARDLINE_PEAK_FLOPS=\"1e15x\" is not a positive number of FLOP/s"},
      {with({{"SHARDLINE_PEAK_FLOPS", "0"}}),
       "environment SHARDLINE_PEAK_FLOPS=\"0\" is not a positive number of FLOP/s"},
      {with({{"SHARDLINE_PEAK_FLOPS", "inf"}}),
       "environment SHARDLINE_PEAK_FLOPS=\"inf\" is not a positive number of FLOP/s"},
      {with({{"SHARDLINE_CPU_MEMORY_CAP_MIB", "lots"}}),
       "environment SHARDLINE_CPU_MEMORY_CAP_MIB=\"lots\" is not a positive number of MiB"},
      {with({{"SHARDLINE_CPU_MEMORY_CAP_MIB", "-64"}}),
       "environment SHARDLINE_CPU_MEMORY_CAP_MIB=\"-64\" is not a positive number of MiB"},
  };
  for (const auto& [vars, message] : cases) {
    absl::StatusOr<RankEnv> e = ReadRankEnv(FakeEnv(vars));
    EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument) << message;
    EXPECT_EQ(e.status().message(), message);
  }
}

TEST(ReadRankEnv, AcceptsBothSpellingsOfTheFlags) {
  absl::StatusOr<RankEnv> e = ReadRankEnv(
      FakeEnv({{"SHARDLINE_STORE_INSECURE", "0"}, {"TORCHELASTIC_USE_AGENT_STORE", "False"}}));
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_FALSE(e->store_insecure);
  EXPECT_FALSE(e->torchelastic_agent_store);
  e = ReadRankEnv(
      FakeEnv({{"SHARDLINE_STORE_INSECURE", "1"}, {"TORCHELASTIC_USE_AGENT_STORE", "True"}}));
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_TRUE(e->store_insecure);
  EXPECT_TRUE(e->torchelastic_agent_store);
}

}  // namespace
}  // namespace shardline::launch
