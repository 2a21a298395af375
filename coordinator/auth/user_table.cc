#include "coordinator/auth/user_table.h"

#include <sys/stat.h>

#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/secret_file.h"
#include "common/secrets.h"
#include "common/status_macros.h"

namespace shardline::coordinator {
namespace {

bool ValidName(absl::string_view name) {
  if (name.empty()) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.' && c != '-' &&
        c != '@') {
      return false;
    }
  }
  return true;
}

}  // namespace

// One optional field after the token: "admin", "max_running_ranks=N" or "max_pending_jobs=N",
// each at most once.
absl::Status ParseOption(absl::string_view field, const std::string& where, UserEntry* e) {
  if (field == "admin" && !e->admin) {
    e->admin = true;
    return absl::OkStatus();
  }
  const size_t eq = field.find('=');
  const absl::string_view key = field.substr(0, eq);
  std::optional<int>* slot = key == "max_running_ranks"  ? &e->limits.max_running_ranks
                             : key == "max_pending_jobs" ? &e->limits.max_pending_jobs
                                                         : nullptr;
  int value = 0;
  if (eq == absl::string_view::npos || slot == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, "field \"", field,
                     "\" is not \"admin\", \"max_running_ranks=N\" or \"max_pending_jobs=N\""));
  }
  if (slot->has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(where, key, " is given twice"));
  }
  if (!absl::SimpleAtoi(field.substr(eq + 1), &value) || value < 0) {
    return absl::InvalidArgumentError(absl::StrCat(where, key, "=\"", field.substr(eq + 1),
                                                   "\" must be a whole number >= 0 (0: none)"));
  }
  *slot = value;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<UserEntry>> ParseUsers(absl::string_view text,
                                                  absl::string_view source) {
  std::vector<UserEntry> out;
  std::set<std::string> names, tokens;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    if (size_t hash = line.find('#'); hash != absl::string_view::npos) line = line.substr(0, hash);
    std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t\r"), absl::SkipEmpty());
    if (fields.empty()) continue;
    const std::string where = absl::StrCat(source, ":", line_no, ": ");
    if (fields.size() < 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          where,
          "expected \"<name> <token> [admin] [max_running_ranks=N] [max_pending_jobs=N]\", got ",
          fields.size(), " field(s)"));
    }
    UserEntry e{std::string(fields[0]), std::string(fields[1]), false, {}};
    if (!ValidName(e.name)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "user name \"", e.name, "\" must be [A-Za-z0-9_.@-]+"));
    }
    for (size_t f = 2; f < fields.size(); ++f) {
      RETURN_IF_ERROR(ParseOption(fields[f], where, &e));
    }
    if (!names.insert(e.name).second) {
      return absl::InvalidArgumentError(absl::StrCat(where, "user ", e.name, " is listed twice"));
    }
    if (!tokens.insert(e.token).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "the token of user ", e.name, " is already another user's"));
    }
    out.push_back(std::move(e));
  }
  return out;
}

absl::StatusOr<std::unique_ptr<UserTable>> UserTable::Create(const std::string& users_file,
                                                             const std::string& legacy_token) {
  auto t = std::make_unique<UserTable>();
  t->users_file_ = users_file;
  t->legacy_token_ = legacy_token;
  FileStamp stamp;
  std::map<std::string, UserLimits> limits;
  absl::StatusOr<Table> table = t->Read(&stamp, &limits);
  if (!table.ok()) return table.status();
  absl::MutexLock lock(&t->mu_);
  t->by_digest_ = *std::move(table);
  t->limits_ = std::move(limits);
  t->stamp_ = stamp;
  return t;
}

absl::StatusOr<UserTable::Table> UserTable::Read(FileStamp* stamp,
                                                 std::map<std::string, UserLimits>* limits) const {
  Table table;
  if (!legacy_token_.empty()) table[Sha256Hex(legacy_token_)] = User{kLegacyAdmin, true};
  if (users_file_.empty()) return table;
  if (absl::Status s = CheckOwnerOnlyFile(users_file_, "--users_file"); !s.ok()) {
    // The users file is the coordinator's own configuration, not a caller's credential: a mode
    // that exposes it (or a path that is not a file) fails a precondition of starting or of
    // reloading, whatever code the token-file readers use.
    return absl::IsNotFound(s) ? s : absl::FailedPreconditionError(s.message());
  }
  struct stat st;
  if (stat(users_file_.c_str(), &st) == 0) {
    stamp->inode = st.st_ino;
    stamp->size = st.st_size;
    stamp->mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  }
  std::ifstream in(users_file_);
  if (!in) return absl::NotFoundError(absl::StrCat("--users_file: cannot read ", users_file_));
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<std::vector<UserEntry>> entries = ParseUsers(text.str(), users_file_);
  if (!entries.ok()) return entries.status();
  for (const UserEntry& e : *entries) {
    if (!legacy_token_.empty() && e.name == kLegacyAdmin) {
      return absl::InvalidArgumentError(
          absl::StrCat(users_file_, ": user \"", kLegacyAdmin,
                       "\" is the --token/--token_file user; rename it or drop --token"));
    }
    if (e.limits.max_running_ranks.has_value() || e.limits.max_pending_jobs.has_value()) {
      (*limits)[e.name] = e.limits;
    }
    auto [it, added] = table.emplace(Sha256Hex(e.token), User{e.name, e.admin});
    if (!added) {
      return absl::InvalidArgumentError(absl::StrCat(users_file_, ": the token of user ", e.name,
                                                     " is the --token/--token_file token"));
    }
  }
  return table;
}

std::optional<User> UserTable::Find(absl::string_view token) const {
  if (token.empty()) return std::nullopt;
  const std::string digest = Sha256Hex(token);
  absl::MutexLock lock(&mu_);
  auto it = by_digest_.find(digest);
  if (it == by_digest_.end()) return std::nullopt;
  return it->second;
}

bool UserTable::empty() const {
  absl::MutexLock lock(&mu_);
  return by_digest_.empty();
}

size_t UserTable::size() const {
  absl::MutexLock lock(&mu_);
  return by_digest_.size();
}

absl::StatusOr<bool> UserTable::ReloadIfChanged() {
  if (users_file_.empty()) return false;
  FileStamp now;
  struct stat st;
  if (stat(users_file_.c_str(), &st) == 0) {
    now.inode = st.st_ino;
    now.size = st.st_size;
    now.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  }
  {
    absl::MutexLock lock(&mu_);
    if (now == stamp_) return false;
  }
  FileStamp read_stamp;
  std::map<std::string, UserLimits> limits;
  absl::StatusOr<Table> table = Read(&read_stamp, &limits);
  absl::MutexLock lock(&mu_);
  // Remember the refused version too: the same bad file is reported once, not every poll.
  stamp_ = table.ok() ? read_stamp : now;
  if (!table.ok()) return table.status();
  by_digest_ = *std::move(table);
  limits_ = std::move(limits);
  return true;
}

std::map<std::string, UserLimits> UserTable::Limits() const {
  absl::MutexLock lock(&mu_);
  return limits_;
}

}  // namespace shardline::coordinator
