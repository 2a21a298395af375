#include "coordinator/observability/job_logs.h"

#include <algorithm>
#include <vector>

namespace shardline::coordinator {
namespace {

constexpr int64_t kLineOverhead = 32;

// What a line costs in a ring: its text plus the fields around it.
int64_t Cost(const LogLine& l) { return static_cast<int64_t>(l.text().size()) + kLineOverhead; }

}  // namespace

void JobLogs::Append(const RankLogChunk& chunk) {
  absl::MutexLock lock(&mu_);
  Log& log = jobs_[chunk.job_id()];
  log.touched = ++clock_;
  const std::pair<int32_t, int32_t> key{chunk.attempt(), chunk.rank()};
  Ring& ring = log.rings[key];
  ring.touched = clock_;
  // The daemon's count; a negative one would hide evictions.
  ring.dropped += std::max<int64_t>(0, chunk.dropped_lines());
  // One line always fits its ring, so a ring never holds more than bytes_per_rank.
  const size_t max_text = static_cast<size_t>(std::max<int64_t>(
      1, std::min(options_.max_line_bytes, options_.bytes_per_rank - kLineOverhead)));
  for (const std::string& text : chunk.lines()) {
    LogLine line;
    line.set_seq(++log.last_seq);
    line.set_attempt(chunk.attempt());
    line.set_rank(chunk.rank());
    line.set_time_unix_ms(chunk.time_unix_ms());
    line.set_text(text.size() > max_text ? text.substr(0, max_text) : text);
    const int64_t cost = Cost(line);
    ring.lines.push_back(std::move(line));
    ring.bytes += cost;
    log.bytes += cost;
    total_bytes_ += cost;
    while (ring.bytes > options_.bytes_per_rank && ring.lines.size() > 1) {
      const int64_t c = Cost(ring.lines.front());
      ring.lines.pop_front();
      ring.bytes -= c;
      log.bytes -= c;
      total_bytes_ -= c;
      ++ring.dropped;
    }
  }
  EvictLocked(chunk.job_id(), key);
}

void JobLogs::EvictLocked(const std::string& keep, std::pair<int32_t, int32_t> keep_ring) {
  while (total_bytes_ > options_.max_total_bytes) {
    auto oldest = jobs_.end();
    for (auto it = jobs_.begin(); it != jobs_.end(); ++it) {
      if (it->first != keep &&
          (oldest == jobs_.end() || it->second.touched < oldest->second.touched)) {
        oldest = it;
      }
    }
    if (oldest == jobs_.end()) {
      // Only `keep` is left: a job of many ranks and attempts could hold world x attempts x
      // bytes_per_rank, so its least recently written rings go too.
      if (!EvictRingLocked(jobs_[keep], keep_ring)) return;
      continue;
    }
    total_bytes_ -= oldest->second.bytes;
    jobs_.erase(oldest);
  }
}

bool JobLogs::EvictRingLocked(Log& log, std::pair<int32_t, int32_t> keep_ring) {
  Ring* oldest = nullptr;
  for (auto& [key, ring] : log.rings) {
    if (key == keep_ring || ring.lines.empty()) continue;
    if (oldest == nullptr || ring.touched < oldest->touched) oldest = &ring;
  }
  if (oldest == nullptr) return false;
  // The ring itself stays (a few bytes per rank the job has) so its dropped count still shows.
  oldest->dropped += static_cast<int64_t>(oldest->lines.size());
  oldest->lines.clear();
  log.bytes -= oldest->bytes;
  total_bytes_ -= oldest->bytes;
  oldest->bytes = 0;
  return true;
}

GetLogsResponse JobLogs::Get(const GetLogsRequest& req) const {
  GetLogsResponse resp;
  resp.set_next_seq(req.after_seq());
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(req.job_id());
  if (it == jobs_.end()) return resp;
  const Log& log = it->second;
  std::vector<const LogLine*> selected;
  for (const auto& [key, ring] : log.rings) {
    const auto& [attempt, rank] = key;
    if (req.attempt() > 0 && attempt != req.attempt()) continue;
    if (!req.all_ranks() && rank != std::max(0, req.rank())) continue;
    resp.set_dropped_lines(resp.dropped_lines() + ring.dropped);
    std::vector<const LogLine*> mine;
    for (const LogLine& l : ring.lines) {
      if (l.seq() > req.after_seq() && l.time_unix_ms() >= req.since_unix_ms()) {
        mine.push_back(&l);
      }
    }
    const size_t skip = req.tail_lines() > 0 && mine.size() > static_cast<size_t>(req.tail_lines())
                            ? mine.size() - req.tail_lines()
                            : 0;
    selected.insert(selected.end(), mine.begin() + static_cast<std::ptrdiff_t>(skip), mine.end());
  }
  std::sort(selected.begin(), selected.end(),
            [](const LogLine* a, const LogLine* b) { return a->seq() < b->seq(); });
  int64_t bytes = 0;
  for (const LogLine* l : selected) {
    bytes += Cost(*l);
    if (bytes > options_.max_response_bytes && resp.lines_size() > 0) {
      resp.set_truncated(true);
      return resp;  // next_seq: the last line sent
    }
    *resp.add_lines() = *l;
    resp.set_next_seq(l->seq());
  }
  // Everything up to the job's newest line was looked at.
  resp.set_next_seq(std::max(req.after_seq(), log.last_seq));
  return resp;
}

int64_t JobLogs::total_bytes() const {
  absl::MutexLock lock(&mu_);
  return total_bytes_;
}

void JobLogs::Forget(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return;
  total_bytes_ -= it->second.bytes;
  jobs_.erase(it);
}

}  // namespace shardline::coordinator
