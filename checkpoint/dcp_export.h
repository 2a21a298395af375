// A Shardline checkpoint as a PyTorch Distributed Checkpoint (torch.distributed.checkpoint, DCP)
// directory that `dcp.load` reads at any torch world size, with its HuggingFaceStorageReader:
//
//   OUT/model-00001-of-00001.safetensors   every tensor whole (float32), __metadata__ with
//                                          format "pt", DCP_VERSION "1.0" and DCP_SHARDING_INFO
//                                          ({"<name>": {"saved_offsets": [0, ...]}, ...})
//
// Names, as PyTorch state dicts name them:
//   <param>                          every parameter, tied ones under each name (a copy), as
//                                    model.state_dict() / get_model_state_dict() name them
//                                    (our names are torchtitan's and Meta's for Llama)
//   optimizer.state.<param>.exp_avg, .exp_avg_sq, .step     (with_optimizer, AdamW)
//   optimizer.state.<param>.momentum_buffer                 (with_optimizer, SGD with momentum)
//                                    the tensors of get_optimizer_state_dict(...,
//                                    StateDictOptions(flatten_optimizer_state_dict=True))
//                                    under "optimizer"; step is a 0-d tensor of the steps taken.
// param_groups (learning rates, betas: not tensors) are not written: the loading code keeps its
// optimizer's own. docs/checkpoint_format.md has the load recipe; checkpoint/dcp_test.py runs it.
//
// Why this layout and not the pickled .metadata + __R_N.distcp files of the default
// FileSystemWriter: it needs no pickle writer, and DCP's own reader reshards it on load.
//
// Thread safety: pure functions over the file system.
#ifndef SHARDLINE_CHECKPOINT_DCP_EXPORT_H_
#define SHARDLINE_CHECKPOINT_DCP_EXPORT_H_

#include <string>

#include "absl/status/status.h"

namespace shardline::checkpoint {

// Writes the committed checkpoint in step_dir under out_dir (created if missing). Every data
// file is verified first. Errors: as CheckpointReader (NOT_FOUND, DATA_LOSS naming the file);
// FAILED_PRECONDITION for with_optimizer on a checkpoint without optimizer state; INTERNAL for
// I/O.
absl::Status ExportDcpFromStepDir(const std::string& step_dir, const std::string& out_dir,
                                  bool with_optimizer);

// The file name in out_dir.
inline constexpr char kDcpFileName[] = "model-00001-of-00001.safetensors";

}  // namespace shardline::checkpoint

#endif  // SHARDLINE_CHECKPOINT_DCP_EXPORT_H_
