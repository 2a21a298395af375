// Fuzz target: MANIFEST.json text through checkpoint/manifest_io.h (ManifestFromJson, the
// plain-value copy MetaFromManifest, and back).
//
// Invariants checked beyond "no crash": a manifest that parses serializes again, and that text
// parses to an equal message; MetaFromManifest/MetaToManifest keep every non-range field.
#include <cstddef>
#include <cstdint>
#include <string>

#include "checkpoint/manifest_io.h"
#include "fuzz/fuzz_check.h"
#include "google/protobuf/util/message_differencer.h"
#include "proto/checkpoint.pb.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 256 * 1024) return 0;
  const std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<shardline::CheckpointManifest> m =
      shardline::checkpoint::ManifestFromJson(text, "fuzz/MANIFEST.json");
  if (!m.ok()) {
    FUZZ_CHECK(m.status().code() == absl::StatusCode::kDataLoss,
               "unparsable manifest gave " + m.status().ToString());
    FUZZ_CHECK(m.status().message().find("fuzz/MANIFEST.json") != std::string::npos,
               "error does not name the file: " + m.status().ToString());
    return 0;
  }
  absl::StatusOr<std::string> json = shardline::checkpoint::ManifestToJson(*m);
  FUZZ_CHECK(json.ok(), "a parsed manifest does not serialize: " + json.status().ToString());
  absl::StatusOr<shardline::CheckpointManifest> again =
      shardline::checkpoint::ManifestFromJson(*json, "again");
  FUZZ_CHECK(again.ok(),
             "serialized manifest does not parse: " + again.status().ToString() + "\n" + *json);
  FUZZ_CHECK(google::protobuf::util::MessageDifferencer::Equals(*m, *again),
             "JSON round trip changed the manifest:\n" + *json);

  // Plain-value copy: every field but the ranges (and the files list) survives.
  const shardline::checkpoint::CheckpointMeta meta = shardline::checkpoint::MetaFromManifest(*m);
  shardline::CheckpointManifest back;
  shardline::checkpoint::MetaToManifest(meta, &back);
  FUZZ_CHECK(back.step() == m->step() && back.world_size() == m->world_size() &&
                 back.model_fingerprint() == m->model_fingerprint() &&
                 back.rng_state() == m->rng_state() && back.job_id() == m->job_id() &&
                 back.optimizer() == m->optimizer() && back.aliases_size() == m->aliases_size(),
             "MetaFromManifest/MetaToManifest lost a field");
  return 0;
}
