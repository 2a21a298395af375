// Fuzz target: job spec text (YAML or JSON) through the whole load pipeline (spec/job_spec.h):
// parse, `--set` overrides, defaults, validation. Leading lines "#set <path>=<value>" (YAML
// comments, so the parser ignores them) become overrides.
//
// Invariants checked beyond "no crash": a spec that loads serializes to YAML and to JSON, and
// both parse back to an equal message (job_spec.h promises this round trip).
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "fuzz/fuzz_check.h"
#include "google/protobuf/util/message_differencer.h"
#include "spec/job_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 64 * 1024) return 0;  // Specs are small; bigger inputs only slow the search.
  const absl::string_view text(reinterpret_cast<const char*>(data), size);

  shardline::spec::LoadOptions options;
  options.base_dir = "/nonexistent-fuzz-base";
  options.validate.check_files = false;  // Keep the target off the file system.
  absl::string_view rest = text;
  while (absl::StartsWith(rest, "#set ")) {
    const size_t eol = rest.find('\n');
    const absl::string_view line =
        rest.substr(5, eol == absl::string_view::npos ? absl::string_view::npos : eol - 5);
    options.overrides.emplace_back(line);
    if (eol == absl::string_view::npos) break;
    rest.remove_prefix(eol + 1);
  }

  // The parser alone (no defaults, no validation) must not crash either.
  (void)shardline::spec::ParseJobSpec(text, "fuzz");

  absl::StatusOr<shardline::JobSpec> spec = shardline::spec::LoadJobSpecText(text, "fuzz", options);
  if (!spec.ok()) {
    FUZZ_CHECK(!spec.status().message().empty(), "an error without a message");
    return 0;
  }
  const std::string yaml = shardline::spec::JobSpecToYaml(*spec);
  absl::StatusOr<shardline::JobSpec> from_yaml = shardline::spec::ParseJobSpec(yaml, "yaml");
  FUZZ_CHECK(from_yaml.ok(), "YAML of a loaded spec does not parse: " +
                                 from_yaml.status().ToString() + "\n" + yaml);
  FUZZ_CHECK(google::protobuf::util::MessageDifferencer::Equals(*spec, *from_yaml),
             "YAML round trip changed the spec:\n" + yaml);
  const std::string json = shardline::spec::JobSpecToJson(*spec);
  absl::StatusOr<shardline::JobSpec> from_json = shardline::spec::ParseJobSpec(json, "json");
  FUZZ_CHECK(from_json.ok(), "JSON of a loaded spec does not parse: " +
                                 from_json.status().ToString() + "\n" + json);
  FUZZ_CHECK(google::protobuf::util::MessageDifferencer::Equals(*spec, *from_json),
             "JSON round trip changed the spec:\n" + json);
  return 0;
}
