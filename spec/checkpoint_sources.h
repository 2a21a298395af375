// What a job starts from, checked on disk at submit (spec validation with check_files), so a bad
// starting point is refused naming the field instead of failing the job once its trainers start:
// checkpoint.init_from_safetensors is a safetensors file (a header length that fits, then a JSON
// object), checkpoint.resume_from a committed step directory or a directory holding one, and
// checkpoint.init_from_dcp a folder with a PyTorch DCP .metadata file. Missing or unreadable
// paths are the path checks' to name (validate.cc); these only look inside what exists.
//
// Thread safety: pure functions over the file system.
#ifndef SHARDLINE_SPEC_CHECKPOINT_SOURCES_H_
#define SHARDLINE_SPEC_CHECKPOINT_SOURCES_H_

#include <string>
#include <vector>

#include "proto/job_spec.pb.h"

namespace shardline::spec {

// One message per problem, each naming the field and the path.
std::vector<std::string> CheckpointSourceProblems(const CheckpointSpec& checkpoint);

}  // namespace shardline::spec

#endif  // SHARDLINE_SPEC_CHECKPOINT_SOURCES_H_
