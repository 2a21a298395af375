// How shardctl's read commands print a proto with --json: field names as in the .proto files.
//
// Thread safety: pure functions.
#ifndef SHARDLINE_CLI_JSON_OUTPUT_H_
#define SHARDLINE_CLI_JSON_OUTPUT_H_

#include <string>

#include "google/protobuf/message.h"

namespace shardline::cli {

// `m` as indented JSON (status, list, metrics ...).
std::string ToJson(const google::protobuf::Message& m);

// `m` as JSON on one line (watch --json: one object per line, for tools that read lines).
std::string ToJsonLine(const google::protobuf::Message& m);

}  // namespace shardline::cli

#endif  // SHARDLINE_CLI_JSON_OUTPUT_H_
