// RunInProcess: runs the FSDP parity rank function for every rank of a config on threads of this
// process, connected by InProcessCommunicators (fsdp/testing/in_process_communicator.h). Fast
// feedback for engine unit tests; the real multi-process parity test uses Gloo
// (fsdp_parity_test.cc).
//
// Thread safety: blocks until every rank's thread finished.
#ifndef SHARDLINE_FSDP_TESTS_INPROCESS_RANKS_H_
#define SHARDLINE_FSDP_TESTS_INPROCESS_RANKS_H_

#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "fsdp/communicator.h"
#include "fsdp/layout.h"
#include "fsdp/testing/in_process_communicator.h"

namespace shardline::fsdp::testing {

// Communicators of all ranks for W = R x S (nullptr for groups of one rank); S must divide W.
struct FakeWorld {
  FakeWorld(int world_size, int shard_degree);
  Communicator* shard(int rank);
  Communicator* replicate(int rank);

  int world_size, shard_degree;
  ParallelLayout layout;  // ParallelLayout::ForShape(world_size, shard_degree)
  std::vector<std::vector<std::unique_ptr<InProcessCommunicator>>> shard_groups, replicate_groups;
};

// Runs fn(rank, shard, replicate) on world_size threads; returns each rank's status.
std::vector<absl::Status> RunOnThreads(
    FakeWorld& world, const std::function<absl::Status(int, Communicator*, Communicator*)>& fn);

}  // namespace shardline::fsdp::testing

#endif  // SHARDLINE_FSDP_TESTS_INPROCESS_RANKS_H_
