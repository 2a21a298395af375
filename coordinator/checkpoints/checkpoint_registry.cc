#include "coordinator/checkpoints/checkpoint_registry.h"

#include <algorithm>
#include <cstdint>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "spec/path_policy.h"

namespace shardline::coordinator {
namespace {
constexpr absl::string_view kManifestName = "MANIFEST.json";
}  // namespace

absl::StatusOr<CheckpointRecord> CheckpointRegistry::Report(const CheckpointReport& report,
                                                            const Layout& layout, absl::Time now,
                                                            bool* newly_committed) {
  *newly_committed = false;
  if (report.step() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint report: step must be >= 0, got ", report.step()));
  }
  if (report.path().empty()) {
    return absl::InvalidArgumentError("checkpoint report: path must not be empty");
  }
  // The path is listed to users and read (MANIFEST.json) by GetCheckpoint: it must not depend on
  // the coordinator's working directory, and files must stay inside it.
  if (report.path()[0] != '/') {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint report: path must be absolute, got \"", report.path().substr(0, 256), "\""));
  }
  for (const std::string& f : report.files()) {
    if (f.empty() || f == "." || f == ".." || f.find('/') != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint report: file \"", f.substr(0, 256),
                       "\" is not a file name in the step directory"));
    }
  }
  if (report.size_bytes() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint report: size_bytes must be >= 0, got ", report.size_bytes()));
  }
  if (report.expected_files() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint report: expected_files must be >= 0, got ", report.expected_files()));
  }
  const Key key(report.job_id(), report.step());
  auto it = records_.find(key);
  if (it == records_.end()) {
    CheckpointRecord rec;
    CheckpointInfo* info = rec.mutable_info();
    info->set_job_id(report.job_id());
    info->set_step(report.step());
    info->set_path(report.path());
    info->set_created_unix_ms(absl::ToUnixMillis(now));
    info->set_world_size(layout.world_size);
    info->set_sharding_strategy(layout.sharding_strategy);
    info->set_shard_degree(layout.shard_degree);
    it = records_.emplace(key, std::move(rec)).first;
  }
  CheckpointRecord& rec = it->second;
  if (rec.info().path() != report.path()) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint report: path ", report.path(), " differs from ", rec.info().path(),
                     " reported earlier for job ", report.job_id(), " step ", report.step()));
  }
  std::set<std::string> files(rec.files().begin(), rec.files().end());
  for (const std::string& f : report.files()) {
    if (f == kManifestName) continue;
    if (rec.info().committed() && !files.count(f)) {
      return absl::FailedPreconditionError(
          absl::StrCat("checkpoint job ", report.job_id(), " step ", report.step(),
                       " is committed; new file ", f, " reported after the commit"));
    }
    files.insert(f);
  }
  rec.clear_files();
  for (const std::string& f : files) rec.add_files(f);
  rec.set_expected_files(std::max(rec.expected_files(), report.expected_files()));
  if (report.manifest_committed()) rec.set_manifest_committed(true);
  if (report.manifest_committed() && report.size_bytes() > 0) {
    rec.mutable_info()->set_size_bytes(report.size_bytes());
  }
  if (!rec.info().committed() && rec.manifest_committed() && rec.expected_files() > 0 &&
      rec.files_size() >= rec.expected_files()) {
    rec.mutable_info()->set_committed(true);
    *newly_committed = true;
  }
  return rec;
}

std::vector<CheckpointInfo> CheckpointRegistry::List(absl::string_view job_id) const {
  std::vector<CheckpointInfo> out;
  for (auto it = records_.lower_bound(Key(std::string(job_id), INT64_MIN));
       it != records_.end() && it->first.first == job_id; ++it) {
    out.push_back(it->second.info());
  }
  return out;
}

absl::StatusOr<CheckpointInfo> CheckpointRegistry::Get(absl::string_view job_id,
                                                       int64_t step) const {
  auto it = records_.find(Key(std::string(job_id), step));
  if (it == records_.end()) {
    return absl::NotFoundError(absl::StrCat("no checkpoint of job ", job_id, " at step ", step));
  }
  return it->second.info();
}

int64_t CheckpointRegistry::LatestCommitted(absl::string_view job_id) const {
  int64_t latest = 0;
  for (const CheckpointInfo& info : List(job_id)) {
    if (info.committed()) latest = std::max(latest, info.step());
  }
  return latest;
}

namespace {

// "/a/b/step_4/" -> "/a/b/step_4" (and "." / ".." removed), so spec paths match recorded ones.
std::string Canonical(absl::string_view path) { return spec::NormalizePath(path); }

std::string Parent(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos || slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

std::string CheckpointRegistry::JobOfCommittedCheckpoint(absl::string_view path) const {
  const std::string want = Canonical(path);
  for (const auto& [key, record] : records_) {
    if (!record.info().committed()) continue;
    const std::string step_dir = Canonical(record.info().path());
    if (step_dir == want || Parent(step_dir) == want) return key.first;
  }
  return "";
}

std::string CheckpointRegistry::JobWhoseDirectoryHolds(absl::string_view path) const {
  const std::string want = Canonical(path);
  for (const auto& [key, record] : records_) {
    const std::string dir = Parent(Canonical(record.info().path()));
    if (dir != "/" && absl::StartsWith(want, dir + "/")) return key.first;
  }
  return "";
}

int64_t CheckpointRegistry::ResumeStep(const JobStatus& st) const {
  const int64_t latest = LatestCommitted(st.job_id());
  const int64_t from_spec = st.spec().checkpoint().resume_step();
  return st.attempt() == 1 && latest == 0 && from_spec > 0 ? from_spec : latest;
}

std::vector<std::pair<std::string, int64_t>> CheckpointRegistry::ApplyRetention(
    absl::string_view job_id, int32_t keep_last, int64_t committed_step, int32_t max_records) {
  std::vector<std::pair<std::string, int64_t>> removed;
  int32_t keep = keep_last;
  if (max_records > 0 && (keep <= 0 || keep > max_records)) keep = max_records;
  std::vector<int64_t> committed;
  for (const CheckpointInfo& info : List(job_id)) {
    if (info.committed()) committed.push_back(info.step());
  }
  const int64_t oldest_kept = keep > 0 && static_cast<int32_t>(committed.size()) > keep
                                  ? committed[committed.size() - keep]
                                  : INT64_MIN;
  for (auto it = records_.lower_bound(Key(std::string(job_id), INT64_MIN));
       it != records_.end() && it->first.first == job_id;) {
    const int64_t step = it->first.second;
    const bool abandoned = !it->second.info().committed() && step < committed_step;
    if (step < oldest_kept || abandoned) {
      removed.push_back(it->first);
      it = records_.erase(it);
    } else {
      ++it;
    }
  }
  return removed;
}

std::vector<std::pair<std::string, int64_t>> CheckpointRegistry::BoundRecords(
    absl::string_view job_id, int64_t step, int32_t max_records) {
  std::vector<std::pair<std::string, int64_t>> removed;
  if (max_records <= 0) return removed;
  const Key first(std::string(job_id), INT64_MIN);
  const int64_t newest_committed = LatestCommitted(job_id);
  size_t count = 0;
  for (auto it = records_.lower_bound(first); it != records_.end() && it->first.first == job_id;
       ++it) {
    ++count;
  }
  // Two passes, oldest first within each: uncommitted records, then committed ones.
  for (const bool committed : {false, true}) {
    for (auto it = records_.lower_bound(first); count > static_cast<size_t>(max_records) &&
                                                it != records_.end() &&
                                                it->first.first == job_id;) {
      const int64_t s = it->first.second;
      if (it->second.info().committed() != committed || s == step || s == newest_committed) {
        ++it;
        continue;
      }
      removed.push_back(it->first);
      it = records_.erase(it);
      --count;
    }
  }
  return removed;
}

void CheckpointRegistry::Restore(const CheckpointRecord& record) {
  records_[Key(record.info().job_id(), record.info().step())] = record;
}

void CheckpointRegistry::ForgetJob(const std::string& job_id) {
  records_.erase(records_.lower_bound({job_id, INT64_MIN}),
                 records_.upper_bound({job_id, INT64_MAX}));
}

}  // namespace shardline::coordinator
