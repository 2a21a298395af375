#include "coordinator/dashboard/session_store.h"

#include <utility>

#include "common/secrets.h"

namespace shardline::coordinator::dashboard {

SessionStore::SessionStore(const SessionOptions& options, const Clock* clock)
    : options_(options), clock_(clock != nullptr ? clock : &real_clock_) {}

absl::Status SessionStore::Validate(const SessionOptions& options) {
  if (options.idle_timeout <= absl::ZeroDuration() || options.lifetime <= absl::ZeroDuration() ||
      options.max_sessions < 1) {
    return absl::InvalidArgumentError(
        "--dashboard_session_idle_timeout_s, --dashboard_session_lifetime_s and "
        "--dashboard_max_sessions must be positive");
  }
  return absl::OkStatus();
}

bool SessionStore::Expired(const Session& s, absl::Time now) const {
  return now - s.last_used >= options_.idle_timeout || now - s.created >= options_.lifetime;
}

void SessionStore::EraseLocked(absl::flat_hash_map<std::string, Session>::iterator it) {
  by_age_.erase(it->second.seq);
  sessions_.erase(it);
}

std::string SessionStore::Create(std::string token) {
  std::string id = RandomSecret();  // 32 bytes from getrandom, hex
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  if (static_cast<int64_t>(sessions_.size()) >= options_.max_sessions) {
    for (auto it = sessions_.begin(); it != sessions_.end();) {
      auto next = std::next(it);
      if (Expired(it->second, now)) EraseLocked(it);
      it = next;
    }
  }
  while (!by_age_.empty() && static_cast<int64_t>(sessions_.size()) >= options_.max_sessions) {
    EraseLocked(sessions_.find(by_age_.begin()->second));
  }
  const uint64_t seq = next_seq_++;
  by_age_.emplace(seq, id);
  sessions_.emplace(id, Session{std::move(token), now, now, seq});
  return id;
}

std::optional<std::string> SessionStore::Lookup(absl::string_view id) {
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return std::nullopt;
  if (Expired(it->second, now)) {
    EraseLocked(it);
    return std::nullopt;
  }
  it->second.last_used = now;
  return it->second.token;
}

bool SessionStore::Delete(absl::string_view id) {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return false;
  EraseLocked(it);
  return true;
}

size_t SessionStore::size() const {
  absl::MutexLock lock(&mu_);
  return sessions_.size();
}

}  // namespace shardline::coordinator::dashboard
