// SessionStore: the dashboard's browser sessions (docs/security.md "Dashboard"). A login
// exchanges a user token for a random session id; the browser's cookie carries only that id, so
// a cookie that leaks (a proxy's log, a shared machine, an unencrypted hop) is not the user's
// long-lived API token, ends at logout, and ends by itself after `idle_timeout` without use or
// `lifetime` after the login, whichever comes first.
//
// The store keeps, per id, the token the session was opened with (in memory only, as the user
// table holds it anyway) and looks it up in the user table at every request, so a token removed
// from --users_file ends its sessions at the next reload. At most `max_sessions` live: a login
// beyond that first drops expired sessions, then the oldest one, so a login flood costs bounded
// memory (and signs out whoever logged in first, never refuses a login).
//
// Thread safety: every method may be called from any thread.
#ifndef SHARDLINE_COORDINATOR_DASHBOARD_SESSION_STORE_H_
#define SHARDLINE_COORDINATOR_DASHBOARD_SESSION_STORE_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace shardline::coordinator::dashboard {

struct SessionOptions {
  absl::Duration idle_timeout = absl::Hours(1);  // --dashboard_session_idle_timeout_s
  absl::Duration lifetime = absl::Hours(12);     // --dashboard_session_lifetime_s
  int64_t max_sessions = 1000;                   // --dashboard_max_sessions
};

class SessionStore {
 public:
  // `clock` must outlive the store; nullptr: the wall clock.
  explicit SessionStore(const SessionOptions& options, const Clock* clock = nullptr);

  // Errors: INVALID_ARGUMENT naming the flag when a duration or the bound is not positive.
  static absl::Status Validate(const SessionOptions& options);

  // A new session for `token` (already checked by the caller); returns its id: 64 hex digits of
  // 32 random bytes (getrandom).
  std::string Create(std::string token);
  // The token of the live session `id`, and marks it used now; nullopt for an unknown, expired
  // (then also dropped) or deleted id.
  std::optional<std::string> Lookup(absl::string_view id);
  // Ends session `id`; false when there was none.
  bool Delete(absl::string_view id);
  size_t size() const;

  const SessionOptions& options() const { return options_; }

 private:
  struct Session {
    std::string token;
    absl::Time created;
    absl::Time last_used;
    uint64_t seq;  // creation order: the key in by_age_
  };

  bool Expired(const Session& s, absl::Time now) const;
  void EraseLocked(absl::flat_hash_map<std::string, Session>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const SessionOptions options_;
  const Clock* const clock_;
  const RealClock real_clock_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Session> sessions_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, std::string> by_age_ ABSL_GUARDED_BY(mu_);  // seq -> id, oldest first
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace shardline::coordinator::dashboard

#endif  // SHARDLINE_COORDINATOR_DASHBOARD_SESSION_STORE_H_
