// Validation of a defaulted JobSpec: ranges of single fields and the rules that tie fields
// together (shard degree divides the world size, batch sizes divide, seq_len fits the model...).
// Every problem is reported, not just the first, each naming the field path and its value:
//
//   fsdp.hybrid_shard_degree: 5 does not divide world_size 4
//   train.global_batch_size: 12 is not divisible by micro_batch_size * world_size = 8
//
// Thread safety: pure functions (CheckFiles reads the file system).
#ifndef SHARDLINE_SPEC_VALIDATE_H_
#define SHARDLINE_SPEC_VALIDATE_H_

#include "absl/status/status.h"
#include "proto/job_spec.pb.h"

namespace shardline::spec {

struct ValidateOptions {
  // Check that every path field (path_policy.h SpecPaths: data.path, data.paths, data.val_path,
  // data.vocab_path, model.torchscript_path, checkpoint.init_from_safetensors) is a readable file,
  // model.hf_dir a readable directory, and that checkpoint.dir can be created (its nearest existing
  // ancestor is a writable directory). Off for the coordinator, which does not see the workers'
  // file systems.
  bool check_files = true;
};

// Returns OK or INVALID_ARGUMENT listing every problem (one per line after the first).
absl::Status Validate(const JobSpec& spec, const ValidateOptions& options = {});

// The subset of Validate the coordinator applies to every submitted spec, whatever else it
// checks: no unknown fields (fields this binary's JobSpec lacks, kept by protobuf: named by path
// and number, "fsdp.#99: unknown field ..."), and the fields it schedules by (name, world_size,
// restart.max_restarts, elastic.min_world_size, and the parallel layout: sharding_strategy with
// hybrid_shard_degree).
// Same messages as Validate; OK or INVALID_ARGUMENT listing every problem.
absl::Status ValidateForScheduling(const JobSpec& spec);

}  // namespace shardline::spec

#endif  // SHARDLINE_SPEC_VALIDATE_H_
