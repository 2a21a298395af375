#include "cli/progress_view.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace shardline::cli {

std::string JobStateName(JobState state) {
  const std::string& name = JobState_Name(state);
  return name.empty() ? "UNKNOWN" : name;
}

std::string FormatDuration(double seconds) {
  if (!(seconds >= 0) || std::isinf(seconds)) return "--";
  const int64_t s = static_cast<int64_t>(std::llround(seconds));
  if (s < 60) return absl::StrCat(s, "s");
  if (s < 3600) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  return absl::StrFormat("%dh%02dm", s / 3600, (s % 3600) / 60);
}

std::string FormatRate(double tokens_per_s) {
  if (!(tokens_per_s >= 0)) return "-- tok/s";
  if (tokens_per_s < 1e3) return absl::StrFormat("%.0f tok/s", tokens_per_s);
  if (tokens_per_s < 1e6) return absl::StrFormat("%.1fk tok/s", tokens_per_s / 1e3);
  return absl::StrFormat("%.2fM tok/s", tokens_per_s / 1e6);
}

std::string FormatBytes(int64_t bytes) {
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  if (bytes < (int64_t{1} << 30)) return absl::StrFormat("%.1f MiB", bytes / 1048576.0);
  return absl::StrFormat("%.2f GiB", bytes / 1073741824.0);
}

std::string ProgressLine(const JobStatus& status, int bar_width) {
  std::string line = absl::StrFormat("%-9s", JobStateName(status.state()));
  const int64_t total = status.total_steps();
  const int64_t step = status.step();
  absl::StrAppend(&line, " step ", step, "/", total);
  if (total > 0 && bar_width > 0) {
    const double frac = std::min(1.0, std::max(0.0, static_cast<double>(step) / total));
    const int filled = static_cast<int>(frac * bar_width);
    absl::StrAppend(&line, " [", std::string(filled, '#'), std::string(bar_width - filled, '.'),
                    "] ", absl::StrFormat("%3.0f%%", frac * 100));
  }
  if (step > 0) {
    absl::StrAppend(&line, absl::StrFormat("  loss %.4f", status.loss()), "  ",
                    FormatRate(status.tokens_per_s()));
  }
  if (status.state() == RUNNING && step > 0) {
    absl::StrAppend(&line, "  ETA ", FormatDuration(status.eta_s()));
  }
  if (status.attempt() > 1) absl::StrAppend(&line, "  attempt ", status.attempt());
  return line;
}

std::string JobListTable(const std::vector<JobStatus>& jobs) {
  size_t id_width = 3, name_width = 4, owner_width = 5;  // the headers: JOB, NAME, OWNER
  auto owner = [](const JobStatus& j) { return j.owner().empty() ? std::string("-") : j.owner(); };
  for (const JobStatus& j : jobs) {
    id_width = std::max(id_width, j.job_id().size());
    name_width = std::max(name_width, j.spec().name().size());
    owner_width = std::max(owner_width, owner(j).size());
  }
  auto row = [&](absl::string_view id, absl::string_view name, absl::string_view who,
                 absl::string_view progress) {
    return absl::StrFormat("%-*s  %-*s  %-*s  %s\n", static_cast<int>(id_width), id,
                           static_cast<int>(name_width), name, static_cast<int>(owner_width), who,
                           progress);
  };
  std::string out = row("JOB", "NAME", "OWNER", "PROGRESS");
  for (const JobStatus& j : jobs) {
    absl::StrAppend(&out, row(j.job_id(), j.spec().name(), owner(j), ProgressLine(j, 10)));
  }
  return out;
}

std::string StatusBlock(const JobStatus& status) {
  std::string out;
  absl::StrAppend(&out, "job        ", status.job_id(), "  (", status.spec().name(), ")\n");
  if (!status.owner().empty()) absl::StrAppend(&out, "owner      ", status.owner(), "\n");
  absl::StrAppend(&out, "state      ", JobStateName(status.state()));
  if (!status.message().empty()) absl::StrAppend(&out, ": ", status.message());
  absl::StrAppend(&out, "\n");
  absl::StrAppend(&out, "attempt    ", status.attempt(), "   world ", status.world_size(), "\n");
  absl::StrAppend(&out, "progress   ", ProgressLine(status), "\n");
  const FaultToleranceSpec& ft = status.spec().fault_tolerance();
  if (ft.mode() == FaultToleranceSpec::REPLICA_GROUPS && status.live_replica_groups_size() > 0) {
    // Which replica groups train now: a lost group shows until its replacement rejoins.
    int groups = 0;
    for (const RankPlacement& p : status.placement())
      groups = std::max(groups, p.shard_group() + 1);
    absl::StrAppend(&out, "replicas   ", status.live_replica_groups_size(), " of ", groups,
                    " shard groups live [", absl::StrJoin(status.live_replica_groups(), ", "),
                    "]  (membership epoch ", status.membership_epoch(), ", min_replicas ",
                    ft.min_replicas(), ")\n");
  }
  if (status.latest_checkpoint_step() > 0) {
    absl::StrAppend(&out, "checkpoint step ", status.latest_checkpoint_step(), "\n");
  }
  if (!std::isnan(status.val_loss()) && status.val_loss() > 0) {
    absl::StrAppend(&out, absl::StrFormat("val loss   %.4f\n", status.val_loss()));
  }
  for (int r = 0; r < status.per_rank_peak_memory_bytes_size(); ++r) {
    if (r == 0) absl::StrAppend(&out, "memory     ");
    absl::StrAppend(&out, "r", r, "=", FormatBytes(status.per_rank_peak_memory_bytes(r)),
                    r + 1 < status.per_rank_peak_memory_bytes_size() ? "  " : "\n");
  }
  if (status.placement_size() > 0) absl::StrAppend(&out, "placement\n");
  for (const RankPlacement& p : status.placement()) {
    // The rank's shard group (the ranks that shard one copy of the model; with fault tolerance
    // the "replica group" counted above) and its replicate group (the ranks holding the same
    // shard in each copy): "shard 0  replica 1" read as shard 0 of replica 1, the other way round.
    absl::StrAppend(&out, absl::StrFormat("  rank %-3d node %-12s slot %d  local %d  "
                                          "shard group %d  replicate group %d",
                                          p.rank(), p.node_name(), p.slot_index(), p.local_rank(),
                                          p.shard_group(), p.replicate_group()));
    // A replacement process of a lost replica group (fault_tolerance REPLICA_GROUPS).
    if (p.generation() > 0) absl::StrAppend(&out, "  generation ", p.generation());
    absl::StrAppend(&out, "\n");
  }
  if (status.events_size() > 0) absl::StrAppend(&out, "events\n");
  if (status.events_dropped() > 0) {
    absl::StrAppend(&out, "  (", status.events_dropped(),
                    " older events dropped: --max_events_per_job)\n");
  }
  for (const JobEvent& e : status.events()) {
    const absl::Time t = absl::FromUnixMillis(e.time_unix_ms());
    absl::StrAppend(&out, "  ", absl::FormatTime("%H:%M:%S", t, absl::LocalTimeZone()),
                    "  attempt ", e.attempt(), "  ", e.kind(), "  ", e.message(), "\n");
  }
  if (!status.sample().empty()) absl::StrAppend(&out, "sample\n", status.sample(), "\n");
  return out;
}

}  // namespace shardline::cli
