// EngineLayout: the part of a ParallelLayout (fsdp/layout.h) the FSDP engine needs, as plain
// values. It exists because layout.h pulls in the job-spec proto (Debian's protobuf headers) and
// LibTorch's include directory ships its own, older google/protobuf headers that shadow them in
// any translation unit that sees both; the engine's LibTorch code therefore never includes
// layout.h. MakeEngineLayout (engine_layout.cc, torch-free) converts.
//
// Thread safety: a value type.
#ifndef SHARDLINE_FSDP_ENGINE_LAYOUT_H_
#define SHARDLINE_FSDP_ENGINE_LAYOUT_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shardline::fsdp {

class ParallelLayout;

struct EngineLayout {
  int world_size = 1;
  int shard_degree = 1;      // S
  int replicate_degree = 1;  // R = W / S
  // FULL_SHARD / HYBRID_SHARD free gathered parameters after each unit's forward.
  bool reshard_after_forward = false;
  std::string strategy;  // "FULL_SHARD", ... (for messages)
  int ShardIndex(int rank) const { return rank % shard_degree; }
  int ReplicateIndex(int rank) const { return rank / shard_degree; }
  std::string DebugString() const;  // "W=4 (R=2 x S=2) HYBRID_SHARD"
};

EngineLayout MakeEngineLayout(const ParallelLayout& layout);

// Validates like ParallelLayout::Create (strategy by name, SageMaker hybrid_shard_degree rules)
// and converts. Errors: INVALID_ARGUMENT naming the values.
absl::StatusOr<EngineLayout> MakeEngineLayout(int world_size, absl::string_view strategy,
                                              int hybrid_shard_degree);

}  // namespace shardline::fsdp

#endif  // SHARDLINE_FSDP_ENGINE_LAYOUT_H_
