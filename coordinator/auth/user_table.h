// UserTable: the coordinator's named users, from --users_file and/or the single --token.
//
// File format: one user a line, `<name> <token> [admin] [max_running_ranks=N]
// [max_pending_jobs=N]`, fields separated by blanks; `#` starts a comment; blank lines are
// skipped. Names are [A-Za-z0-9_.@-]+; names and tokens are unique. The two bounds are the
// user's own quotas (coordinator/placement/user_quota.h: N >= 0, 0 for none), in place of the
// coordinator's --max_running_ranks_per_user / --max_pending_jobs_per_user for that user.
// The file must not be readable or writable by group or others (it holds tokens): a mode with
// any of 077 set is refused, naming the file and its mode.
//
// The legacy --token/--token_file is one admin user named "admin" (a file that also names a user
// "admin" is refused). ReloadIfChanged() re-reads the file when its modification time, size or
// inode changed; a file that no longer parses (or has the wrong mode) keeps the old table and the
// reason is returned (the server logs it).
//
// Lookups hash the presented token (SHA-256) and find the digest; tokens are not kept in plain.
//
// Thread safety: every method may be called from any thread.
#ifndef SHARDLINE_COORDINATOR_AUTH_USER_TABLE_H_
#define SHARDLINE_COORDINATOR_AUTH_USER_TABLE_H_

#include <sys/types.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace shardline::coordinator {

struct User {
  std::string name;
  bool admin = false;
};

// A user's own quotas from the file; unset: the coordinator's flags.
struct UserLimits {
  std::optional<int> max_running_ranks;
  std::optional<int> max_pending_jobs;
};

struct UserEntry {
  std::string name;
  std::string token;
  bool admin = false;
  UserLimits limits;
};

// Parses the users file format above; `source` names the file in errors ("users.txt:3: ...").
// Errors: INVALID_ARGUMENT naming the line.
absl::StatusOr<std::vector<UserEntry>> ParseUsers(absl::string_view text, absl::string_view source);

class UserTable {
 public:
  // The name the legacy single token gets.
  static constexpr char kLegacyAdmin[] = "admin";

  // No users: user authentication is off (everyone is "anonymous", an admin).
  UserTable() = default;
  // `users_file` (may be empty: none) plus `legacy_token` (may be empty: none) as admin "admin".
  // Errors: NOT_FOUND when the file cannot be stat'ed or read; FAILED_PRECONDITION when it is
  // not a regular file or group or others have access to it (the message names its mode and
  // `chmod 600`: common/secret_file.h CheckOwnerOnlyFile); ParseUsers's; INVALID_ARGUMENT when
  // the file names "admin" too or repeats the legacy token.
  static absl::StatusOr<std::unique_ptr<UserTable>> Create(const std::string& users_file,
                                                           const std::string& legacy_token);

  // The user holding `token`; nullopt for none.
  std::optional<User> Find(absl::string_view token) const;
  bool empty() const;
  size_t size() const;
  // The users with a bound of their own, by name (as of the last successful read).
  std::map<std::string, UserLimits> Limits() const;

  // Re-reads the users file if it changed. Returns true when the new table is in place, false
  // when nothing changed (or there is no file); an error (old table kept) when the changed file
  // is refused (reported once per change).
  absl::StatusOr<bool> ReloadIfChanged();

 private:
  struct FileStamp {
    ino_t inode = 0;
    off_t size = -1;
    int64_t mtime_ns = -1;
    bool operator==(const FileStamp& o) const {
      return inode == o.inode && size == o.size && mtime_ns == o.mtime_ns;
    }
  };
  using Table = absl::flat_hash_map<std::string, User>;  // token digest -> user
  // Reads and checks the file into a table (with the legacy token) and the users' limits.
  // `stamp` receives the file's stamp as read.
  absl::StatusOr<Table> Read(FileStamp* stamp, std::map<std::string, UserLimits>* limits) const;

  std::string users_file_;
  std::string legacy_token_;
  mutable absl::Mutex mu_;
  Table by_digest_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, UserLimits> limits_ ABSL_GUARDED_BY(mu_);
  FileStamp stamp_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shardline::coordinator

#endif  // SHARDLINE_COORDINATOR_AUTH_USER_TABLE_H_
