// Starts a run from a PyTorch DCP checkpoint directory (checkpoint.init_from_dcp): what
// torch.distributed.checkpoint.save wrote from FSDP2, torchtitan or a plain model, read by
// DcpReader (dcp_reader.h) with no Python, at any torch world size and into any of our world
// sizes and strategies (each rank reads only the chunks its own range of a tensor overlaps).
//
// Names: a parameter is found under its name, "model.<name>" (dcp.save({"model": sd, ...})),
// or an alias of a tied parameter the same ways; every parameter must be there, with the
// model's shape. Optimizer state, when the checkpoint has it, is what get_optimizer_state_dict
// gives and dcp.save flattens: "optimizer.state.<name>.exp_avg", ".exp_avg_sq" and ".step"
// (AdamW), ".momentum_buffer" (SGD). All or none: state for some parameters only is an error
// naming the first one missing; none loads the weights alone (optimizer fresh, step 0). The run
// continues at AdamW's step (its bias correction and the learning-rate schedule go on from
// there); torch's SGD keeps no step, so an SGD run starts at step 0 with its momentum. The data
// position is where our sampler is after that many steps (torch's data loader state is not
// read). param_groups (learning rate, betas) are not read: the job's spec sets them.
//
// Errors: DcpReader's (NOT_FOUND, DATA_LOSS, INVALID_ARGUMENT naming the file and tensor);
// INVALID_ARGUMENT naming a missing parameter or state, a shape mismatch, or steps that differ
// between parameters. Nothing is loaded into the engine until every name and shape is checked.
// Thread safety: training thread only.
#ifndef SHARDLINE_CHECKPOINT_DCP_LOAD_H_
#define SHARDLINE_CHECKPOINT_DCP_LOAD_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "fsdp/fsdp_engine.h"
#include "fsdp/sharded_optimizer.h"

namespace shardline::checkpoint {

struct DcpLoadResult {
  int64_t step = 0;              // Optimizer steps the checkpoint had taken (0: weights only).
  bool optimizer_state = false;  // Whether optimizer state was loaded.
  int tensors = 0;               // Tensors read.
};

// optimizer_kind: "adamw" or "sgd" (the job's optimizer; its state kinds are looked for).
absl::StatusOr<DcpLoadResult> LoadDcpIntoEngine(const std::string& dir,
                                                const std::string& optimizer_kind,
                                                fsdp::FsdpEngine* engine,
                                                fsdp::ShardedOptimizer* optimizer);

}  // namespace shardline::checkpoint

#endif  // SHARDLINE_CHECKPOINT_DCP_LOAD_H_
