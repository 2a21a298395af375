#include "fsdp/comm_groups.h"

#include <map>
#include <mutex>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "fsdp/comm_args.h"
#include "fsdp/gloo_communicator.h"
#include "fsdp/local_communicator.h"
#include "fsdp/no_op_communicator.h"
#include "fsdp/prefix_kv_store.h"

namespace shardline::fsdp {
namespace {

std::mutex& RegistryMutex() {
  static std::mutex mu;
  return mu;
}

std::map<CommBackend, GroupCommunicatorFactory>& Registry() {
  static auto* registry = new std::map<CommBackend, GroupCommunicatorFactory>();
  return *registry;
}

absl::StatusOr<std::unique_ptr<Communicator>> CreateGloo(const GroupSpec& group,
                                                         const CommOptions& options) {
  GlooCommunicator::Options gloo;
  gloo.name = group.name;
  gloo.rank = group.rank;
  gloo.size = group.size;
  gloo.store = group.store;
  gloo.global_ranks = group.ranks;
  gloo.address = options.address;
  gloo.interface = options.interface;
  gloo.timeout = options.timeout;
  absl::StatusOr<std::unique_ptr<GlooCommunicator>> comm = GlooCommunicator::Create(gloo);
  if (!comm.ok()) return comm.status();
  return std::unique_ptr<Communicator>(std::move(*comm));
}

absl::StatusOr<GroupCommunicatorFactory> FactoryFor(CommBackend backend) {
  if (backend == CommBackend::kGloo) return GroupCommunicatorFactory(&CreateGloo);
  std::lock_guard<std::mutex> lock(RegistryMutex());
  auto it = Registry().find(backend);
  if (it == Registry().end()) {
    return absl::FailedPreconditionError(
        "comm backend nccl is not linked into this binary (build on a machine with CUDA and "
        "depend on //fsdp:nccl_communicator)");
  }
  return it->second;
}

// Creates the communicator of one group that contains `rank`.
absl::StatusOr<std::unique_ptr<Communicator>> CreateGroup(const std::string& name,
                                                          const std::vector<int>& ranks, int rank,
                                                          KvStore* store,
                                                          const CommOptions& options,
                                                          const GroupCommunicatorFactory& factory) {
  if (ranks.size() == 1) return std::unique_ptr<Communicator>(new LocalCommunicator(name));
  int group_rank = -1;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] == rank) group_rank = static_cast<int>(i);
  }
  PrefixKvStore group_store(store, absl::StrCat(options.key_prefix, "/", name));
  GroupSpec spec;
  spec.name = name;
  spec.rank = group_rank;
  spec.size = static_cast<int>(ranks.size());
  spec.store = &group_store;
  spec.ranks = ranks;
  return factory(spec, options);
}

std::string LayoutValue(int world_size, int shard_degree, const CommOptions& options) {
  return absl::StrCat("world_size ", world_size, " shard_degree ", shard_degree, " backend ",
                      options.backend == CommBackend::kGloo ? "gloo" : "nccl",
                      options.fake_collectives ? " fake_collectives" : "");
}

// The factory of the shard and replicate groups under fsdp.fake_collectives.
GroupCommunicatorFactory FakeFactory(CommBackend backend) {
  const at::DeviceType device = backend == CommBackend::kNccl ? at::kCUDA : at::kCPU;
  return [device](const GroupSpec& group,
                  const CommOptions&) -> absl::StatusOr<std::unique_ptr<Communicator>> {
    return std::unique_ptr<Communicator>(
        new NoOpCommunicator(group.name, group.rank, group.size, device));
  };
}

// Every rank publishes the layout it was given and compares it with everyone else's, so a
// rank started with another world size, shard degree or backend fails fast with both values
// named instead of hanging in the first collective.
// `members`: the world ranks taking part (all W, or the live replica groups' ranks).
absl::Status CheckRanksAgree(int world_size, int shard_degree, int rank,
                             const std::vector<int>& members, KvStore* store,
                             const CommOptions& options) {
  PrefixKvStore layout_store(store, absl::StrCat(options.key_prefix, "/layout"));
  const std::string mine = LayoutValue(world_size, shard_degree, options);
  absl::Status s = layout_store.Set(absl::StrCat("rank", rank), mine);
  if (!s.ok()) return s;
  std::vector<std::string> keys;
  for (int r : members) keys.push_back(absl::StrCat("rank", r));
  absl::StatusOr<std::vector<std::string>> all = layout_store.Get(keys, options.timeout);
  if (!all.ok()) {
    return absl::Status(
        all.status().code(),
        absl::StrCat(CommErrorPrefix("world", "connect", 0), "waiting for all ", members.size(),
                     " ranks to join (", all.status().message(), ")"));
  }
  for (size_t i = 0; i < members.size(); ++i) {
    if ((*all)[i] != mine) {
      return absl::InvalidArgumentError(
          absl::StrCat(CommErrorPrefix("world", "connect", 0), "rank ", members[i],
                       " was started with ", (*all)[i], " but rank ", rank, " with ", mine));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CommBackend> ParseCommBackend(absl::string_view name) {
  if (name == "gloo") return CommBackend::kGloo;
  if (name == "nccl") return CommBackend::kNccl;
  return absl::InvalidArgumentError(
      absl::StrCat("comm backend: unknown backend \"", name, "\"; valid: gloo, nccl"));
}

bool RegisterCommBackend(CommBackend backend, GroupCommunicatorFactory factory) {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  Registry()[backend] = std::move(factory);
  return true;
}

void CommGroups::set_step(int64_t step) {
  for (Communicator* c : {world.get(), shard.get(), replicate.get()}) {
    if (c != nullptr) c->set_step(step);
  }
}

absl::StatusOr<CommGroups> CreateCommGroups(const ParallelLayout& layout, int rank, KvStore* store,
                                            const CommOptions& options) {
  // Every replica group is live: the world is all W ranks and replicate group j is {j, j+S, ...},
  // the layout's own groups.
  return CreateMemberCommGroups(layout, rank, LiveGroups::All(layout).groups(), store, options);
}

absl::StatusOr<CommGroups> CreateMemberCommGroups(const ParallelLayout& layout, int rank,
                                                  const std::vector<int>& live_groups,
                                                  KvStore* store, const CommOptions& options) {
  const int world_size = layout.world_size();
  const int shard_degree = layout.shard_degree();
  if (rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " is outside world_size ", world_size));
  }
  if (store == nullptr) return absl::InvalidArgumentError("CreateCommGroups: no store");
  const int own_group = layout.ReplicateIndex(rank);
  absl::StatusOr<LiveGroups> live = LiveGroups::Create(layout, live_groups);
  if (!live.ok()) return live.status();
  if (!live->Contains(own_group)) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, "'s replica group ", own_group,
                                                   " is not among the live groups"));
  }
  absl::StatusOr<GroupCommunicatorFactory> factory = FactoryFor(options.backend);
  if (!factory.ok()) return factory.status();
  const std::vector<int> world_ranks = live->Ranks();
  absl::Status agreed =
      CheckRanksAgree(world_size, shard_degree, rank, world_ranks, store, options);
  if (!agreed.ok()) return agreed;

  CommGroups groups;
  absl::StatusOr<std::unique_ptr<Communicator>> world =
      CreateGroup("world", world_ranks, rank, store, options, *factory);
  if (!world.ok()) return world.status();
  groups.world = std::move(*world);
  const GroupCommunicatorFactory group_factory =
      options.fake_collectives ? FakeFactory(options.backend) : *factory;
  absl::StatusOr<std::unique_ptr<Communicator>> shard =
      CreateGroup(absl::StrCat("shard[", own_group, "]"), layout.ShardGroupRanks(rank), rank, store,
                  options, group_factory);
  if (!shard.ok()) return shard.status();
  groups.shard = std::move(*shard);
  const int shard_index = layout.ShardIndex(rank);
  absl::StatusOr<std::unique_ptr<Communicator>> replicate =
      CreateGroup(absl::StrCat("replicate[", shard_index, "]"), live->ReplicatePeers(shard_index),
                  rank, store, options, group_factory);
  if (!replicate.ok()) return replicate.status();
  groups.replicate = std::move(*replicate);
  return groups;
}

}  // namespace shardline::fsdp
