// Generic YAML <-> protobuf conversion, walked against the message descriptor so that every
// mistake is reported with the field path and the offending value:
//
//   model.n_head: "abc" is not an integer (line 7)
//   unknown field "fsdp.shard_degre" (did you mean "hybrid_shard_degree"?) (line 12)
//
// Accepted input: YAML 1.2 (block or flow style), hence also JSON. Keys are the proto field names
// (snake_case; the JSON camelCase names are accepted too). Enum values are written by name, with
// or without case (`FULL_SHARD`, `full_shard`); integers must be integral and in range for the
// field's type; floats accept YAML forms (`3e-4`, `.inf` is rejected later by validation);
// booleans accept true/false/yes/no/on/off. A null value (`key:` with nothing) is an error, so a
// forgotten value is never silently zero. Repeated fields take a YAML sequence.
//
// Thread safety: pure functions.
#ifndef SHARDLINE_SPEC_PROTO_YAML_H_
#define SHARDLINE_SPEC_PROTO_YAML_H_

#include <set>
#include <string>

#include <google/protobuf/message.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace shardline::spec {

// Paths ("model.n_head") of the fields a document or override set explicitly, even to zero.
using FieldPaths = std::set<std::string>;

// Parses `text` and merges it into `message` (fields not mentioned keep their value).
// `source` names the input in errors ("job.yaml"). Adds every field written to `written` if
// non-null. Errors: INVALID_ARGUMENT naming the field path, the value and the line.
absl::Status MergeYamlText(absl::string_view text, absl::string_view source,
                           google::protobuf::Message* message, FieldPaths* written);

// Applies one `path=value` assignment, e.g. "fsdp.hybrid_shard_degree=3" or
// "model={n_layer: 2, n_head: 2}" (the value is parsed as YAML, so messages merge).
// Errors: INVALID_ARGUMENT naming the path and value.
absl::Status ApplyAssignment(absl::string_view assignment, google::protobuf::Message* message,
                             FieldPaths* written);

// Emits `message` as block-style YAML. Fields at their zero value are left out (parsing the text
// back gives an equal message); floats keep full precision.
std::string MessageToYaml(const google::protobuf::Message& message);

// The closest field name of `descriptor` to `name` (substring match or small edit distance), or
// "" when nothing is close. Exposed for tests.
std::string SuggestFieldName(const google::protobuf::Descriptor& descriptor,
                             absl::string_view name);

}  // namespace shardline::spec

#endif  // SHARDLINE_SPEC_PROTO_YAML_H_
