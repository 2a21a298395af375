// Parity harness: trains TinyGpt (fsdp/testing/tiny_gpt.h) for a few steps on a deterministic
// global batch, either unsharded in one process with LibTorch's own optimizers (the reference)
// or as one rank of an FSDP run (FsdpEngine + ShardedOptimizer) that sees only its slice of
// each global batch. Both report the global mean loss per step and the final parameters, so a
// test can require they agree.
//
// Thread safety: RunReference and RunFsdpRank may run concurrently on different threads (they
// share no state; model construction takes a process-wide lock because it seeds LibTorch's
// global RNG).
#ifndef SHARDLINE_FSDP_TESTS_PARITY_H_
#define SHARDLINE_FSDP_TESTS_PARITY_H_

#include <map>
#include <ostream>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"
#include "fsdp/communicator.h"
#include "fsdp/wrap_policy.h"

namespace shardline::fsdp::testing {

struct ParityConfig {
  std::string strategy = "FULL_SHARD";
  int world_size = 1;
  int hybrid_shard_degree = 0;
  WrapPolicyKind wrap = WrapPolicyKind::kTransformerBlock;
  int64_t min_num_params = 3000;  // SIZE_BASED.
  int micro_batches = 1;          // Per rank per step (no_sync on all but the last).
  bool sgd = false;               // SGD with momentum instead of AdamW.
  int prefetch = 0;               // 0: none; 1: forward + backward kPre; 2: forward + kPost.
  bool activation_checkpointing = false;
  // Mixed precision (in-process runs only; not part of Encode()).
  at::ScalarType param_dtype = at::kFloat;
  at::ScalarType reduce_dtype = at::kFloat;
  double loss_scale = 0;  // > 0: dynamic loss scaling (fsdp/loss_scaler.h) from this scale.
  // FsdpEngineOptions::cpu_offload, and the device RunFsdpRank trains on (the GPU test runs
  // TinyGpt on CUDA); in-process runs only, not part of Encode().
  bool cpu_offload = false;
  at::Device device = at::kCPU;
  // ShardedOptimizerOptions::fused (AdamW only; in-process runs only, not part of Encode()).
  bool fused_optimizer = false;
  // FsdpEngineOptions::overlap_reduce (in-process runs only, not part of Encode()).
  bool overlap_reduce = true;
  // Every rank trains on the whole global batch instead of its slice (in-process runs only, not
  // part of Encode()): with exact reductions an S-rank run then equals the W = 1 run bit for bit
  // (standin_parity_gpu_test).
  bool identical_ranks = false;
  int steps = 20;
  int global_batch = 12;    // Sequences per step over all ranks.
  int die_at_step = -1;     // Failure tests: this rank SIGKILLs itself at that step.
  int start_step = 0;       // Resume tests: first step's index (data and lr follow it).
  bool save_state = false;  // Fill ParityResult::state (params + optimizer, every rank).

  std::string Name() const;  // "FULL_SHARD_W4_S0_TRANSFORMER_BLOCK_mb1_adamw"
  // Round trip through one command-line token: "FULL_SHARD:4:0:TRANSFORMER_BLOCK:1:adamw:0".
  std::string Encode() const;
  static absl::StatusOr<ParityConfig> Decode(const std::string& s);
};

// For gtest messages.
inline void PrintTo(const ParityConfig& c, std::ostream* os) { *os << c.Name(); }

struct ParityResult {
  std::vector<double> losses;  // Global mean loss per step.
  // Global gradient norm per step, before clipping (catches gradient scaling mistakes that
  // AdamW, being scale-invariant, would hide).
  std::vector<double> grad_norms;
  std::map<std::string, at::Tensor> params;  // Final parameters (canonical names).
  // With save_state: full parameters, optimizer state ("<name>.exp_avg", ...) and "step".
  std::map<std::string, at::Tensor> state;
  int64_t skipped_steps = 0;  // Loss scaling: steps skipped for non-finite gradients.
  double final_loss_scale = 0;
};

// The single-process unsharded run on the whole global batch.
ParityResult RunReference(const ParityConfig& config);

// One rank of the FSDP run. `losses` are this rank's own mean losses (the caller averages
// over ranks); `params` are filled on rank 0 only. Communicators may be nullptr for groups of
// one rank.
// `resume` (optional): a ParityResult::state to load before the first step.
absl::StatusOr<ParityResult> RunFsdpRank(const ParityConfig& config, int rank, Communicator* shard,
                                         Communicator* replicate,
                                         const std::map<std::string, at::Tensor>* resume = nullptr);

// Golden file: one loss per line ("<step> <loss>"), '#' comments.
absl::StatusOr<std::vector<double>> ReadGoldenLosses(const std::string& path);
std::string FormatGoldenLosses(const std::vector<double>& losses);

}  // namespace shardline::fsdp::testing

#endif  // SHARDLINE_FSDP_TESTS_PARITY_H_
