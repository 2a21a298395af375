// EngineOptionsFromSpec: the one conversion from the job spec's fsdp.* fields to the engine's
// FsdpEngineOptions (fsdp/engine_options.h). Torch-free (it sees the generated proto headers,
// which LibTorch code must not), so the trainer's config target calls it and hands the plain
// struct on.
//
// Thread safety: a pure function.
#ifndef SHARDLINE_FSDP_ENGINE_OPTIONS_FROM_SPEC_H_
#define SHARDLINE_FSDP_ENGINE_OPTIONS_FROM_SPEC_H_

#include "absl/status/statusor.h"
#include "fsdp/engine_options.h"

namespace shardline {
class FsdpSpec;  // proto/job_spec.proto
}  // namespace shardline

namespace shardline::fsdp {

// Every engine option the spec sets; `rank` and `wrap_policy.block_type` keep their defaults
// (the caller knows them). Expects a spec with defaults filled (spec/defaults.cc); an
// unspecified dtype or backward prefetch means fp32 / none.
// Errors: INVALID_ARGUMENT naming fsdp.auto_wrap_policy when it is unspecified or unknown.
absl::StatusOr<FsdpEngineOptions> EngineOptionsFromSpec(const FsdpSpec& spec);

}  // namespace shardline::fsdp

#endif  // SHARDLINE_FSDP_ENGINE_OPTIONS_FROM_SPEC_H_
