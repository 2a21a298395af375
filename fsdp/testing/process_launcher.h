// RunRanks: runs one program as N real processes (one per rank) on this machine, for
// multi-process tests of the communicators and the FSDP engine.
//
//   std::vector<std::string> args = {"--steps=20"};
//   RunRanksResult result = RunRanks(RunfilePath("fsdp/testing/comm_worker"), 4, args,
//                                    absl::Seconds(120));
//   ASSERT_TRUE(result.AllSucceeded()) << result.Summary();
//   EXPECT_NE(result.ranks[2].output.find("ok"), std::string::npos);
//
// Each rank r runs `binary extra_args... --rank=r --world_size=N --store_host=127.0.0.1
// --store_port=P`, where P is the port of a TcpKvServer that RunRanks starts on loopback for
// the duration of the run (a fresh free port each time, so tests never collide), unless
// Options::start_store is false. A rank's stdout and stderr are captured together. When the
// timeout passes, every rank still running is killed with SIGKILL and marked timed_out.
//
// Thread safety: RunRanks may be called from any thread; it blocks until all ranks exited.
#ifndef SHARDLINE_FSDP_TESTING_PROCESS_LAUNCHER_H_
#define SHARDLINE_FSDP_TESTING_PROCESS_LAUNCHER_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace shardline::fsdp::testing {

struct RankResult {
  int rank = 0;
  // The exit status if the process exited; -N if it was killed by signal N; -1 if it could not
  // be started (the reason is in `output`).
  int exit_code = -1;
  bool timed_out = false;  // Killed by RunRanks at the timeout.
  std::string output;      // stdout and stderr, interleaved as written.
};

struct RunRanksResult {
  std::vector<RankResult> ranks;  // Indexed by rank.
  bool AllSucceeded() const;      // Every rank exited with 0.
  // "rank 0: exit 0\n<output>..." for failure messages (each output cut to its last 4 KiB).
  std::string Summary() const;
};

struct RunRanksOptions {
  absl::Duration timeout = absl::Seconds(120);
  bool start_store = true;  // Start a TcpKvServer and pass --store_host/--store_port.
  // Extra arguments for one rank (appended after extra_args), e.g. to pick a victim.
  std::function<std::vector<std::string>(int rank)> per_rank_args;
  // Extra environment variables "NAME=value" for every rank (added to this process's env).
  std::vector<std::string> env;
};

RunRanksResult RunRanks(const std::string& binary, int world_size,
                        const std::vector<std::string>& extra_args, absl::Duration timeout);
RunRanksResult RunRanks(const std::string& binary, int world_size,
                        const std::vector<std::string>& extra_args, const RunRanksOptions& options);

// The path of a data dependency of the running Bazel test (e.g. "fsdp/testing/comm_worker"),
// found under $TEST_SRCDIR/$TEST_WORKSPACE; the relative path itself outside Bazel.
std::string RunfilePath(const std::string& relative);

}  // namespace shardline::fsdp::testing

#endif  // SHARDLINE_FSDP_TESTING_PROCESS_LAUNCHER_H_
