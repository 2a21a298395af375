#include "checkpoint/manifest_io.h"

#include <fstream>
#include <sstream>

#include <google/protobuf/util/json_util.h>

#include "absl/strings/str_cat.h"
#include "common/open_beneath.h"

namespace shardline::checkpoint {

absl::StatusOr<std::string> ManifestToJson(const CheckpointManifest& m) {
  google::protobuf::util::JsonPrintOptions o;
  o.add_whitespace = true;
  o.preserve_proto_field_names = true;
  o.always_print_primitive_fields = true;
  std::string out;
  auto s = google::protobuf::util::MessageToJsonString(m, &out, o);
  if (!s.ok()) return absl::InternalError(absl::StrCat("manifest to JSON: ", s.ToString()));
  return out;
}

absl::StatusOr<CheckpointManifest> ManifestFromJson(const std::string& json,
                                                    const std::string& what) {
  CheckpointManifest m;
  google::protobuf::util::JsonParseOptions o;
  o.ignore_unknown_fields = true;  // Newer writers may add fields within a format version.
  auto s = google::protobuf::util::JsonStringToMessage(json, &m, o);
  if (!s.ok()) {
    return absl::DataLossError(absl::StrCat(what, ": not a checkpoint manifest: ", s.ToString()));
  }
  return m;
}

absl::Status WriteManifestFile(const std::string& path, const CheckpointManifest& m) {
  absl::StatusOr<std::string> json = ManifestToJson(m);
  if (!json.ok()) return json.status();
  return WriteFileAtomic(path, *json);
}

absl::StatusOr<CheckpointManifest> ReadManifestFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFileBeneath(path, "checkpoint manifest");
  if (absl::IsNotFound(text.status())) {
    return absl::NotFoundError(absl::StrCat("missing manifest ", path));
  }
  if (!text.ok()) return text.status();
  absl::StatusOr<CheckpointManifest> m = ManifestFromJson(*text, path);
  if (!m.ok()) return m.status();
  if (m->format_version() != kFormatVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": unknown checkpoint format_version ", m->format_version(),
                     " (this build reads version ", kFormatVersion, ")"));
  }
  return m;
}

CheckpointMeta MetaFromManifest(const CheckpointManifest& m) {
  CheckpointMeta meta;
  meta.format_version = m.format_version();
  meta.step = m.step();
  meta.model_fingerprint = m.model_fingerprint();
  meta.world_size = m.world_size();
  meta.strategy = m.sharding_strategy();
  meta.shard_degree = m.shard_degree();
  meta.data_epoch = m.data_epoch();
  meta.data_position = m.data_position();
  meta.rng_state = m.rng_state();
  meta.optimizer = m.optimizer();
  meta.optimizer_step = m.optimizer_step();
  meta.job_id = m.job_id();
  meta.attempt = m.attempt();
  meta.created_unix = m.created_unix();
  for (const auto& [alias, canonical] : m.aliases()) meta.aliases[alias] = canonical;
  for (const TensorEntry& t : m.tensors()) {
    TensorInfo info;
    info.name = t.name();
    info.shape.assign(t.shape().begin(), t.shape().end());
    info.dtype = t.dtype();
    meta.tensors.push_back(std::move(info));
  }
  return meta;
}

void MetaToManifest(const CheckpointMeta& meta, CheckpointManifest* m) {
  m->set_format_version(meta.format_version);
  m->set_step(meta.step);
  m->set_model_fingerprint(meta.model_fingerprint);
  m->set_world_size(meta.world_size);
  m->set_sharding_strategy(meta.strategy);
  m->set_shard_degree(meta.shard_degree);
  m->set_data_epoch(meta.data_epoch);
  m->set_data_position(meta.data_position);
  m->set_rng_state(meta.rng_state);
  m->set_optimizer(meta.optimizer);
  m->set_optimizer_step(meta.optimizer_step);
  m->set_job_id(meta.job_id);
  m->set_attempt(meta.attempt);
  m->set_created_unix(meta.created_unix);
  for (const auto& [alias, canonical] : meta.aliases) (*m->mutable_aliases())[alias] = canonical;
}

}  // namespace shardline::checkpoint
