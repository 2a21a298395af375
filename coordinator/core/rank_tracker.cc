#include "coordinator/core/rank_tracker.h"

#include <cstdint>
#include <cstdlib>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/logging.h"
#include "launch/exit_codes.h"

namespace shardline::coordinator {
namespace {

std::string LastLine(const std::string& text) {
  std::vector<std::string> lines = absl::StrSplit(text, '\n', absl::SkipWhitespace());
  // A trainer's line keeps its message only (common/logging's LogLineMessage): the failure's
  // reason names the rank already and the event has its own time.
  return lines.empty() ? "" : std::string(LogLineMessage(lines.back()));
}

}  // namespace

void RankTracker::StartAttempt(const JobStatus& status) { Track(status, /*restored=*/false); }

void RankTracker::RestoreAttempt(const JobStatus& status) { Track(status, /*restored=*/true); }

void RankTracker::Track(const JobStatus& status, bool restored) {
  Attempt& a = attempts_[status.job_id()];
  a.attempt = status.attempt();
  a.started_unix_ms = status.started_unix_ms();
  a.placement.clear();
  a.generation.clear();
  a.placed_unix_ms.clear();
  a.acked.clear();
  a.stopped.clear();
  a.ever_placed.clear();
  for (const RankPlacement& p : status.placement()) {
    a.placement.emplace_back(p.worker_id(), p.node_name());
    a.generation.push_back(p.generation());
    a.placed_unix_ms.push_back(status.started_unix_ms());
    a.ever_placed.insert({p.rank(), p.worker_id()});
    if (restored) {
      a.acked.insert(p.rank());
      running_[p.worker_id()].insert({status.job_id(), p.rank()});
    }
  }
}

void RankTracker::EndAttempt(const std::string& job_id) {
  auto it = attempts_.find(job_id);
  if (it == attempts_.end()) return;
  for (int32_t rank = 0; rank < static_cast<int32_t>(it->second.placement.size()); ++rank) {
    auto w = running_.find(it->second.placement[rank].first);
    if (w != running_.end()) w->second.erase({job_id, rank});
  }
  ended_[job_id] = {it->second.attempt, std::move(it->second.ever_placed)};
  attempts_.erase(it);
}

bool RankTracker::IsRunning(const std::string& job_id, int32_t attempt) const {
  auto it = attempts_.find(job_id);
  return it != attempts_.end() && it->second.attempt == attempt;
}

bool RankTracker::PlacedOn(const std::string& job_id, int32_t attempt, int32_t rank,
                           const std::string& worker_id) const {
  if (auto it = attempts_.find(job_id); it != attempts_.end() && it->second.attempt == attempt) {
    return it->second.ever_placed.count({rank, worker_id}) > 0;
  }
  auto it = ended_.find(job_id);
  return it != ended_.end() && it->second.first == attempt &&
         it->second.second.count({rank, worker_id}) > 0;
}

bool RankTracker::IsAcked(const std::string& job_id, int32_t rank) const {
  auto it = attempts_.find(job_id);
  return it != attempts_.end() && it->second.acked.count(rank) > 0;
}

bool RankTracker::IsStopped(const std::string& job_id, int32_t rank) const {
  auto it = attempts_.find(job_id);
  return it != attempts_.end() && it->second.stopped.count(rank) > 0;
}

bool RankTracker::HasRunningRanks(const std::string& worker_id) const {
  auto it = running_.find(worker_id);
  return it != running_.end() && !it->second.empty();
}

RankTracker::Observation RankTracker::Observe(const std::string& worker_id, const RankStatus& rs) {
  Observation seen;
  const bool exited = rs.state() == RankStatus::EXITED;
  auto it = attempts_.find(rs.job_id());
  if (it == attempts_.end() || it->second.attempt != rs.attempt()) {
    // A rank of an attempt that is over (e.g. failed while this worker was cut off) still runs
    // here: stop it, once per stream of the worker, within the stream's bound.
    if (exited) return seen;
    std::set<std::pair<std::string, int32_t>>& sent = stops_sent_[worker_id];
    seen.stop = sent.size() < kMaxStopsPerStream && sent.insert({rs.job_id(), rs.attempt()}).second;
    if (sent.empty()) stops_sent_.erase(worker_id);
    return seen;
  }
  Attempt& a = it->second;
  const int32_t rank = rs.rank();
  // A worker speaks only for its own ranks, and an older generation of a replaced rank is over
  // (it was stopped; its exit is expected).
  if (rank < 0 || rank >= static_cast<int32_t>(a.placement.size()) ||
      a.placement[rank].first != worker_id || rs.generation() < a.generation[rank]) {
    return seen;
  }
  seen.current = true;
  const bool stopped = a.stopped.count(rank) > 0;
  if (a.acked.insert(rank).second && !exited && !stopped) {
    running_[worker_id].insert({rs.job_id(), rank});
  }
  if (!exited) return seen;
  running_[worker_id].erase({rs.job_id(), rank});
  if (stopped) return seen;  // the rest of a lost replica group: any exit is expected
  if (rs.exit_code() == 0) {
    seen.exited_ok = true;
    return seen;
  }
  std::string reason =
      absl::StrCat("rank ", rank, " on node ", a.placement[rank].second,
                   rs.exit_code() < 0 ? " was killed by signal " : " exited with code ",
                   std::abs(rs.exit_code()));
  const std::string last = LastLine(rs.log_tail());
  if (!last.empty()) absl::StrAppend(&reason, ": ", last);
  if (rs.exit_code() == launch::kExitCheckpointDirNotShared) {
    seen.failed = RankFailure{rs.job_id(), "CHECKPOINT_DIR_NOT_SHARED", std::move(reason),
                              /*restartable=*/false};
    return seen;
  }
  seen.failed = RankFailure{rs.job_id(), "RANK_FAILED", std::move(reason)};
  seen.failed->ranks.push_back(rank);
  return seen;
}

std::vector<RankFailure> RankTracker::LostRanks(const std::string& worker_id,
                                                const RankKeys& reported) const {
  std::vector<RankFailure> out;
  auto w = running_.find(worker_id);
  if (w == running_.end()) return out;
  // A rank the worker acknowledged earlier and no longer lists is gone (e.g. its daemon
  // restarted and the kernel killed its trainers): fail the attempt rather than wait forever.
  for (const auto& [job_id, rank] : w->second) {
    if (reported.count({job_id, rank})) continue;
    if (!out.empty() && out.back().job_id == job_id) {
      out.back().ranks.push_back(rank);
      continue;
    }
    auto a = attempts_.find(job_id);
    if (a == attempts_.end()) continue;  // not reached: running ranks belong to tracked attempts
    const std::string& node = a->second.placement[rank].second;
    RankFailure f{job_id, "RANK_LOST",
                  absl::StrCat("rank ", rank, " on node ", node,
                               " is no longer reported by its worker (daemon restarted?)")};
    f.ranks.push_back(rank);
    out.push_back(std::move(f));
  }
  return out;
}

std::vector<RankFailure> RankTracker::StartTimeouts(absl::Time now, absl::Duration limit) const {
  std::vector<RankFailure> out;
  const int64_t now_ms = absl::ToUnixMillis(now);
  const int64_t limit_ms = absl::ToInt64Milliseconds(limit);
  for (const auto& [job_id, a] : attempts_) {
    if (a.acked.size() >= a.placement.size()) continue;
    std::vector<std::string> missing;
    std::vector<int32_t> ranks;
    bool replacement = false;
    for (int32_t rank = 0; rank < static_cast<int32_t>(a.placement.size()); ++rank) {
      if (a.acked.count(rank) || a.stopped.count(rank) ||
          now_ms - a.placed_unix_ms[rank] <= limit_ms) {
        continue;
      }
      missing.push_back(absl::StrCat(rank, " (", a.placement[rank].second, ")"));
      ranks.push_back(rank);
      replacement |= a.generation[rank] > 0;
    }
    if (ranks.empty()) continue;
    RankFailure f{
        job_id, "RANK_START_TIMEOUT",
        absl::StrCat("ranks [", absl::StrJoin(missing, ", "),
                     "] were not reported by their workers within ", absl::FormatDuration(limit),
                     replacement ? " of their placement" : " of the attempt's start")};
    f.ranks = std::move(ranks);
    out.push_back(std::move(f));
  }
  return out;
}

std::vector<RankFailure> RankTracker::WorkerDied(const std::string& worker_id,
                                                 const std::string& node, absl::Duration timeout) {
  running_.erase(worker_id);
  stops_sent_.erase(worker_id);
  std::vector<RankFailure> out;
  for (const auto& [job_id, a] : attempts_) {
    std::vector<int32_t> lost;
    for (int32_t rank = 0; rank < static_cast<int32_t>(a.placement.size()); ++rank) {
      if (a.placement[rank].first == worker_id && !a.stopped.count(rank)) lost.push_back(rank);
    }
    if (lost.empty()) continue;
    RankFailure f{job_id, "WORKER_LOST",
                  absl::StrCat("worker ", worker_id, " (node ", node, ") missed heartbeats for ",
                               absl::FormatDuration(timeout), "; ranks [",
                               absl::StrJoin(lost, ", "), "] lost")};
    f.ranks = std::move(lost);
    out.push_back(std::move(f));
  }
  return out;
}

void RankTracker::ForgetJob(const std::string& job_id) {
  attempts_.erase(job_id);
  ended_.erase(job_id);
  for (auto w = stops_sent_.begin(); w != stops_sent_.end();) {
    std::set<std::pair<std::string, int32_t>>& sent = w->second;
    sent.erase(sent.lower_bound({job_id, INT32_MIN}), sent.upper_bound({job_id, INT32_MAX}));
    w = sent.empty() ? stops_sent_.erase(w) : std::next(w);
  }
}

void RankTracker::StreamOpened(const std::string& worker_id) { stops_sent_.erase(worker_id); }

void RankTracker::StopSent(const std::string& worker_id, const std::string& job_id,
                           int32_t attempt) {
  std::set<std::pair<std::string, int32_t>>& sent = stops_sent_[worker_id];
  if (sent.size() < kMaxStopsPerStream) sent.insert({job_id, attempt});
  if (sent.empty()) stops_sent_.erase(worker_id);
}

void RankTracker::StopRanks(const std::string& job_id, const std::vector<int32_t>& ranks) {
  auto it = attempts_.find(job_id);
  if (it == attempts_.end()) return;
  Attempt& a = it->second;
  for (int32_t rank : ranks) {
    if (rank < 0 || rank >= static_cast<int32_t>(a.placement.size())) continue;
    a.stopped.insert(rank);
    auto w = running_.find(a.placement[rank].first);
    if (w != running_.end()) w->second.erase({job_id, rank});
  }
}

void RankTracker::ReplaceRank(const std::string& job_id, int32_t rank, const std::string& worker_id,
                              const std::string& node, int32_t generation, absl::Time now) {
  auto it = attempts_.find(job_id);
  if (it == attempts_.end()) return;
  Attempt& a = it->second;
  if (rank < 0 || rank >= static_cast<int32_t>(a.placement.size())) return;
  auto w = running_.find(a.placement[rank].first);
  if (w != running_.end()) w->second.erase({job_id, rank});
  a.placement[rank] = {worker_id, node};
  a.ever_placed.insert({rank, worker_id});
  a.generation[rank] = generation;
  a.placed_unix_ms[rank] = absl::ToUnixMillis(now);
  a.acked.erase(rank);
  a.stopped.erase(rank);
}

}  // namespace shardline::coordinator
