#include "cli/json_output.h"

#include "google/protobuf/util/json_util.h"

namespace shardline::cli {
namespace {

std::string Print(const google::protobuf::Message& m, bool add_whitespace) {
  google::protobuf::util::JsonPrintOptions o;
  o.preserve_proto_field_names = true;
  o.add_whitespace = add_whitespace;
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(m, &out, o);
  return out;
}

}  // namespace

std::string ToJson(const google::protobuf::Message& m) { return Print(m, true); }

std::string ToJsonLine(const google::protobuf::Message& m) { return Print(m, false); }

}  // namespace shardline::cli
