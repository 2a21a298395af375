#include "fsdp/tests/inprocess_ranks.h"

#include <thread>

#include "absl/strings/str_cat.h"

namespace shardline::fsdp::testing {

FakeWorld::FakeWorld(int w, int s)
    : world_size(w), shard_degree(s), layout(ParallelLayout::ForShape(w, s).value()) {
  const int r = layout.replicate_degree();
  for (int g = 0; g < r; ++g) {
    shard_groups.push_back(InProcessCommunicator::MakeGroup(absl::StrCat("shard[", g, "]"), s));
  }
  for (int j = 0; j < s; ++j) {
    replicate_groups.push_back(
        InProcessCommunicator::MakeGroup(absl::StrCat("replicate[", j, "]"), r));
  }
}

Communicator* FakeWorld::shard(int rank) {
  if (shard_degree == 1) return nullptr;
  return shard_groups[layout.ReplicateIndex(rank)][layout.ShardIndex(rank)].get();
}

Communicator* FakeWorld::replicate(int rank) {
  if (layout.replicate_degree() == 1) return nullptr;
  return replicate_groups[layout.ShardIndex(rank)][layout.ReplicateIndex(rank)].get();
}

std::vector<absl::Status> RunOnThreads(
    FakeWorld& world, const std::function<absl::Status(int, Communicator*, Communicator*)>& fn) {
  std::vector<absl::Status> statuses(world.world_size);
  std::vector<std::thread> threads;
  for (int r = 0; r < world.world_size; ++r) {
    threads.emplace_back([&, r] { statuses[r] = fn(r, world.shard(r), world.replicate(r)); });
  }
  for (auto& t : threads) t.join();
  return statuses;
}

}  // namespace shardline::fsdp::testing
