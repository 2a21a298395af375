#include "fsdp/engine_layout.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "fsdp/layout.h"

namespace shardline::fsdp {

std::string EngineLayout::DebugString() const {
  return absl::StrCat("W=", world_size, " (R=", replicate_degree, " x S=", shard_degree, ") ",
                      strategy);
}

EngineLayout MakeEngineLayout(const ParallelLayout& layout) {
  EngineLayout e;
  e.world_size = layout.world_size();
  e.shard_degree = layout.shard_degree();
  e.replicate_degree = layout.replicate_degree();
  e.reshard_after_forward = layout.reshard_after_forward();
  e.strategy = layout.StrategyName();
  return e;
}

absl::StatusOr<EngineLayout> MakeEngineLayout(int world_size, absl::string_view strategy,
                                              int hybrid_shard_degree) {
  ASSIGN_OR_RETURN(ShardingStrategy parsed, ParseShardingStrategy(strategy));
  ASSIGN_OR_RETURN(ParallelLayout layout,
                   ParallelLayout::Create(world_size, parsed, hybrid_shard_degree));
  return MakeEngineLayout(layout);
}

}  // namespace shardline::fsdp
