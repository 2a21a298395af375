#include "coordinator/placement/draining_slots.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"

namespace shardline::coordinator {

void DrainingSlots::Hold(const std::string& worker, const std::string& job_id, int32_t attempt,
                         int32_t rank, int32_t slot, int32_t generation) {
  held_[worker][{job_id, attempt, rank}] = Held{slot, generation};
}

bool DrainingSlots::ReleaseExited(const std::string& worker,
                                  const google::protobuf::RepeatedPtrField<RankStatus>& ranks,
                                  WorkerRegistry* registry) {
  auto w = held_.find(worker);
  if (w == held_.end()) return false;
  std::map<Key, int32_t> alive;  // -> the oldest generation listed alive
  for (const RankStatus& rs : ranks) {
    if (rs.state() == RankStatus::EXITED) continue;
    auto [it, inserted] = alive.emplace(Key{rs.job_id(), rs.attempt(), rs.rank()}, rs.generation());
    if (!inserted) it->second = std::min(it->second, rs.generation());
  }
  bool released = false;
  for (auto it = w->second.begin(); it != w->second.end();) {
    auto a = alive.find(it->first);
    if (a != alive.end() && a->second <= it->second.generation) {
      ++it;
      continue;
    }
    const auto& [job_id, attempt, rank] = it->first;
    registry->ReleaseSlot(worker, it->second.slot, absl::StrCat(job_id, "/", attempt));
    it = w->second.erase(it);
    released = true;
  }
  if (w->second.empty()) held_.erase(w);
  return released;
}

std::vector<DrainingSlots::LostRanks> DrainingSlots::ForgetWorker(const std::string& worker) {
  std::vector<LostRanks> lost;
  auto w = held_.find(worker);
  if (w == held_.end()) return lost;
  // Keys are ordered by (job, attempt, rank): one group per attempt, ranks ascending.
  for (const auto& [key, slot] : w->second) {
    const auto& [job_id, attempt, rank] = key;
    if (lost.empty() || lost.back().job_id != job_id || lost.back().attempt != attempt) {
      lost.push_back({job_id, attempt, {}});
    }
    lost.back().ranks.push_back(rank);
  }
  held_.erase(w);
  return lost;
}

std::map<std::string, int> DrainingSlots::CountByJob() const {
  std::map<std::string, int> count;
  for (const auto& [worker, ranks] : held_) {
    for (const auto& [key, slot] : ranks) count[std::get<0>(key)]++;
  }
  return count;
}

}  // namespace shardline::coordinator
