#include "coordinator/placement/worker_registry.h"

#include <algorithm>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/secrets.h"

namespace shardline::coordinator {

WorkerRegistry::WorkerRegistry(const Clock* clock, absl::Duration heartbeat_timeout,
                               absl::Duration blind_gap)
    : clock_(clock), timeout_(heartbeat_timeout), blind_gap_(blind_gap), last_reap_(clock->Now()) {}

absl::StatusOr<std::string> WorkerRegistry::Register(const RegisterWorkerRequest& req,
                                                     absl::string_view credential_sha256,
                                                     std::optional<absl::string_view> presented) {
  if (req.node_name().empty()) {
    return absl::InvalidArgumentError("RegisterWorker: node_name must not be empty");
  }
  if (req.slots().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("RegisterWorker: slots must not be empty (node ", req.node_name(), ")"));
  }
  std::set<int32_t> indices;
  for (const Slot& s : req.slots()) {
    if (!indices.insert(s.index()).second) {
      return absl::InvalidArgumentError(absl::StrCat("RegisterWorker: slots: duplicate index ",
                                                     s.index(), " on node ", req.node_name()));
    }
    if (s.kind() == Slot::KIND_UNSPECIFIED) {
      return absl::InvalidArgumentError(
          absl::StrCat("RegisterWorker: slots[", s.index(), "].kind must be CPU or CUDA"));
    }
  }
  absl::MutexLock lock(&mu_);
  std::string id;
  auto it = id_by_node_.find(req.node_name());
  if (it != id_by_node_.end()) {
    id = it->second;
    const Worker& live = workers_[id];
    const std::string digest = presented.has_value() ? Sha256Hex(*presented) : std::string();
    const bool retry_of_lost_answer =
        !live.predecessor_sha256.empty() && DigestEquals(live.predecessor_sha256, digest);
    if (presented.has_value() && live.info.state() == WorkerInfo::ALIVE &&
        !live.credential_sha256.empty() && !DigestEquals(live.credential_sha256, digest) &&
        !retry_of_lost_answer) {
      return absl::PermissionDeniedError(
          absl::StrCat("RegisterWorker: node ", req.node_name(), " is registered as worker ", id,
                       " and alive (last heartbeat ",
                       absl::FormatDuration(absl::Trunc(clock_->Now() - live.last_heartbeat,
                                                        absl::Milliseconds(100))),
                       " ago): registering it again needs that worker's current credential (",
                       presented->empty() ? "none was sent" : "the one sent does not match",
                       "); a restarted daemon is let in once ", id, " misses heartbeats for ",
                       absl::FormatDuration(timeout_), " and is declared dead"));
    }
  } else {
    id = absl::StrCat("w", next_id_++);
    id_by_node_[req.node_name()] = id;
  }
  Worker& w = workers_[id];
  const bool was_alive = w.info.state() == WorkerInfo::ALIVE;
  w.info.set_worker_id(id);
  w.info.set_node_name(req.node_name());
  w.info.set_address(req.address());
  *w.info.mutable_slots() = req.slots();
  *w.info.mutable_labels() = req.labels();
  w.info.set_state(WorkerInfo::ALIVE);
  w.last_heartbeat = clock_->Now();
  w.credential_sha256 = std::string(credential_sha256);
  w.predecessor_sha256 =
      presented.has_value() && !presented->empty() ? Sha256Hex(*presented) : std::string();
  if (!was_alive) w.busy.clear();
  // Reservations of slots that no longer exist are dropped.
  for (auto b = w.busy.begin(); b != w.busy.end();) {
    b = indices.count(b->first) ? std::next(b) : w.busy.erase(b);
  }
  return id;
}

absl::Status WorkerRegistry::CheckCredential(absl::string_view worker_id,
                                             absl::string_view credential) const {
  const std::string digest = Sha256Hex(credential);
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(worker_id);
  if (it == workers_.end()) return absl::NotFoundError(absl::StrCat("unknown worker ", worker_id));
  if (it->second.credential_sha256.empty() || !DigestEquals(it->second.credential_sha256, digest)) {
    return absl::PermissionDeniedError(
        absl::StrCat("worker credential does not match worker ", worker_id));
  }
  return absl::OkStatus();
}

std::string WorkerRegistry::CredentialDigest(absl::string_view worker_id) const {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(worker_id);
  return it == workers_.end() ? std::string() : it->second.credential_sha256;
}

void WorkerRegistry::RestoreCredential(absl::string_view worker_id,
                                       absl::string_view credential_sha256) {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(worker_id);
  if (it != workers_.end()) it->second.credential_sha256 = std::string(credential_sha256);
}

absl::Status WorkerRegistry::Heartbeat(absl::string_view worker_id) {
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(worker_id);
  if (it == workers_.end()) {
    return absl::NotFoundError(absl::StrCat("unknown worker ", worker_id));
  }
  if (it->second.info.state() != WorkerInfo::ALIVE) {
    return absl::FailedPreconditionError(
        absl::StrCat("worker ", worker_id, " was declared dead; register again"));
  }
  it->second.last_heartbeat = now;
  // Heartbeats come with the current credential (the service checks it first): the
  // registration's answer arrived, so what it presented no longer registers the node.
  it->second.predecessor_sha256.clear();
  return absl::OkStatus();
}

std::vector<std::string> WorkerRegistry::ReapDead() {
  const absl::Time now = clock_->Now();
  std::vector<std::string> dead;
  absl::MutexLock lock(&mu_);
  const absl::Duration since_last = now - last_reap_;
  last_reap_ = now;
  blind_for_ = absl::ZeroDuration();
  if (since_last > blind_gap_) {
    blind_for_ = since_last;
    for (auto& [id, w] : workers_) {
      if (w.info.state() == WorkerInfo::ALIVE) w.last_heartbeat = std::max(w.last_heartbeat, now);
    }
    return dead;
  }
  for (auto& [id, w] : workers_) {
    if (w.info.state() == WorkerInfo::ALIVE && now - w.last_heartbeat > timeout_) {
      w.info.set_state(WorkerInfo::DEAD);
      w.busy.clear();
      dead.push_back(id);
    }
  }
  std::sort(dead.begin(), dead.end());
  return dead;
}

absl::Duration WorkerRegistry::blind_for() const {
  absl::MutexLock lock(&mu_);
  return blind_for_;
}

bool WorkerRegistry::IsAlive(absl::string_view worker_id) const {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(worker_id);
  return it != workers_.end() && it->second.info.state() == WorkerInfo::ALIVE;
}

std::vector<NodeCapacity> WorkerRegistry::FreeCapacity(Slot::Kind kind) const {
  std::vector<NodeCapacity> out;
  absl::MutexLock lock(&mu_);
  for (const auto& [id, w] : workers_) {
    if (w.info.state() != WorkerInfo::ALIVE) continue;
    NodeCapacity cap;
    cap.worker_id = id;
    cap.node_name = w.info.node_name();
    cap.address = w.info.address();
    for (const Slot& s : w.info.slots()) {
      if (s.kind() == kind && !w.busy.count(s.index())) cap.free_slots.push_back(s.index());
    }
    if (cap.free_slots.empty()) continue;
    std::sort(cap.free_slots.begin(), cap.free_slots.end());
    out.push_back(std::move(cap));
  }
  std::sort(out.begin(), out.end(),
            [](const NodeCapacity& a, const NodeCapacity& b) { return a.node_name < b.node_name; });
  return out;
}

absl::Status WorkerRegistry::Reserve(absl::string_view worker_id, int32_t slot_index,
                                     absl::string_view job_id) {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(worker_id);
  if (it == workers_.end()) return absl::NotFoundError(absl::StrCat("unknown worker ", worker_id));
  Worker& w = it->second;
  if (w.info.state() != WorkerInfo::ALIVE) {
    return absl::FailedPreconditionError(absl::StrCat("worker ", worker_id, " is dead"));
  }
  bool exists = false;
  for (const Slot& s : w.info.slots()) exists |= s.index() == slot_index;
  if (!exists) {
    return absl::NotFoundError(absl::StrCat("worker ", worker_id, " has no slot ", slot_index));
  }
  auto b = w.busy.find(slot_index);
  if (b != w.busy.end() && b->second != job_id) {
    return absl::FailedPreconditionError(
        absl::StrCat("slot ", slot_index, " of worker ", worker_id, " is busy with ", b->second));
  }
  w.busy[slot_index] = std::string(job_id);
  return absl::OkStatus();
}

absl::Status WorkerRegistry::ReservePlan(const Plan& plan, absl::string_view holder) {
  for (const RankPlan& r : plan.ranks) {
    if (absl::Status s = Reserve(r.worker_id, r.slot_index, holder); !s.ok()) {
      ReleaseJob(holder);
      return s;
    }
  }
  return absl::OkStatus();
}

void WorkerRegistry::ReleaseSlot(absl::string_view worker_id, int32_t slot_index,
                                 absl::string_view holder) {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(worker_id);
  if (it == workers_.end()) return;
  auto b = it->second.busy.find(slot_index);
  if (b != it->second.busy.end() && b->second == holder) it->second.busy.erase(b);
}

void WorkerRegistry::ReleaseJob(absl::string_view job_id) {
  absl::MutexLock lock(&mu_);
  for (auto& [id, w] : workers_) {
    for (auto b = w.busy.begin(); b != w.busy.end();) {
      b = b->second == job_id ? w.busy.erase(b) : std::next(b);
    }
  }
}

WorkerInfo WorkerRegistry::ToInfo(const Worker& w) const {
  WorkerInfo info = w.info;
  info.set_busy_slots(static_cast<int32_t>(w.busy.size()));
  info.set_last_heartbeat_unix_ms(absl::ToUnixMillis(w.last_heartbeat));
  return info;
}

std::vector<WorkerInfo> WorkerRegistry::List() const {
  std::vector<WorkerInfo> out;
  absl::MutexLock lock(&mu_);
  for (const auto& [id, w] : workers_) out.push_back(ToInfo(w));
  std::sort(out.begin(), out.end(),
            [](const WorkerInfo& a, const WorkerInfo& b) { return a.node_name() < b.node_name(); });
  return out;
}

absl::StatusOr<WorkerInfo> WorkerRegistry::Get(absl::string_view worker_id) const {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(worker_id);
  if (it == workers_.end()) return absl::NotFoundError(absl::StrCat("unknown worker ", worker_id));
  return ToInfo(it->second);
}

void WorkerRegistry::Restore(const WorkerInfo& info) {
  absl::MutexLock lock(&mu_);
  Worker& w = workers_[info.worker_id()];
  w.info = info;
  w.info.clear_busy_slots();
  w.info.clear_last_heartbeat_unix_ms();
  w.last_heartbeat = info.state() == WorkerInfo::ALIVE
                         ? clock_->Now()
                         : absl::FromUnixMillis(info.last_heartbeat_unix_ms());
  id_by_node_[info.node_name()] = info.worker_id();
  int64_t n = 0;
  if (absl::StartsWith(info.worker_id(), "w") &&
      absl::SimpleAtoi(absl::string_view(info.worker_id()).substr(1), &n)) {
    next_id_ = std::max(next_id_, n + 1);
  }
}

int WorkerRegistry::alive_count() const {
  absl::MutexLock lock(&mu_);
  int n = 0;
  for (const auto& [id, w] : workers_) n += w.info.state() == WorkerInfo::ALIVE;
  return n;
}

}  // namespace shardline::coordinator
