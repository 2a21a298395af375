#include "worker/trainer_user.h"

#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace shardline::worker {
namespace {

enum class Want { kExecute, kTraverse, kWrite, kNoRead };

struct Probe {
  Want want;
  std::string flag;
  std::string path;
};

// The probe child's answer: the first probe that failed (or -1) and its errno.
struct ProbeResult {
  int index = -1;
  int error = 0;
};

std::string Failure(const TrainerUser& user, const Probe& p, int error) {
  const std::string who = absl::StrCat("--trainer_user ", user.name, " (uid ", user.uid, ")");
  switch (p.want) {
    case Want::kExecute:
      return absl::StrCat(who, " cannot run ", p.flag, " ", p.path, ": ", strerror(error),
                          "; install the trainer where that user can read and execute it (and "
                          "search every directory above it)");
    case Want::kTraverse:
      return absl::StrCat(who, " cannot reach ", p.flag, " ", p.path, ": ", strerror(error),
                          "; every directory above it needs search (x) permission for that user");
    case Want::kWrite:
      return absl::StrCat(who, " cannot write under ", p.flag, " ", p.path, ": ", strerror(error),
                          "; make the directory that user's (chown ", user.name, ")");
    case Want::kNoRead:
      return absl::StrCat(who, " can read ", p.flag, " ", p.path,
                          ": trainers run job code, so a credential must not be readable by "
                          "them; chmod 0600 it, owned by the daemon's user");
  }
  return "";
}

}  // namespace

absl::StatusOr<TrainerUser> ResolveTrainerUser(const std::string& name) {
  if (geteuid() != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--trainer_user ", name, ": the daemon runs as uid ", geteuid(),
        ", not root, so it cannot start trainers as another user; run it as root or leave "
        "the flag out (trainers then run as the daemon's user and can read its credentials)"));
  }
  struct passwd pw;
  struct passwd* found = nullptr;
  std::vector<char> buf(16384);
  const int rc = getpwnam_r(name.c_str(), &pw, buf.data(), buf.size(), &found);
  if (rc != 0 || found == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--trainer_user ", name, ": no such user",
                     rc != 0 ? absl::StrCat(" (", strerror(rc), ")") : std::string(),
                     "; create it (useradd --system --no-create-home shardline-trainer)"));
  }
  if (pw.pw_uid == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--trainer_user ", name, " is root (uid 0): give an unprivileged user"));
  }
  TrainerUser u;
  u.name = name;
  u.uid = pw.pw_uid;
  u.gid = pw.pw_gid;
  int n = 32;
  u.groups.resize(n);
  while (getgrouplist(name.c_str(), pw.pw_gid, u.groups.data(), &n) < 0) u.groups.resize(n);
  u.groups.resize(n);
  return u;
}

int DropToTrainerUser(const TrainerUser& user) {
  if (setgroups(user.groups.size(), user.groups.data()) != 0) return errno;
  if (setresgid(user.gid, user.gid, user.gid) != 0) return errno;
  if (setresuid(user.uid, user.uid, user.uid) != 0) return errno;
  // Every id was set: getting root back must be impossible now.
  if (setuid(0) == 0) return EPERM;
  return 0;
}

absl::Status CheckTrainerUser(const TrainerUser& user, const TrainerUserChecks& checks) {
  std::vector<Probe> probes;
  if (!checks.trainer.empty()) probes.push_back({Want::kExecute, "--trainer", checks.trainer});
  if (!checks.work_dir.empty()) probes.push_back({Want::kTraverse, "--work_dir", checks.work_dir});
  for (const std::string& d : checks.writable_dirs) {
    probes.push_back({Want::kWrite, "--checkpoint_roots", d});
  }
  for (const std::string& f : checks.credential_files) {
    if (!f.empty()) probes.push_back({Want::kNoRead, "credential file", f});
  }
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("trainer user check: pipe: ", strerror(errno)));
  }
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return absl::InternalError(absl::StrCat("trainer user check: fork: ", strerror(errno)));
  }
  if (pid == 0) {
    // Child: async-signal-safe calls only (the daemon may have threads).
    ProbeResult r;
    if (const int e = DropToTrainerUser(user); e != 0) {
      r.index = static_cast<int>(probes.size());
      r.error = e;
    }
    for (size_t i = 0; r.index < 0 && i < probes.size(); ++i) {
      const Probe& p = probes[i];
      const char* path = p.path.c_str();
      int ok = 0;
      switch (p.want) {
        case Want::kExecute:
          ok = access(path, X_OK | R_OK);
          break;
        case Want::kTraverse:
          ok = access(path, X_OK);
          break;
        case Want::kWrite:
          ok = access(path, W_OK | X_OK);
          break;
        case Want::kNoRead: {
          const int fd = open(path, O_RDONLY | O_NOCTTY | O_NONBLOCK);
          if (fd >= 0) {
            close(fd);
            ok = -1;
            errno = 0;
          } else {
            ok = 0;
          }
          break;
        }
      }
      if (ok != 0) {
        r.index = static_cast<int>(i);
        r.error = errno;
      }
    }
    (void)!write(fds[1], &r, sizeof(r));
    _exit(0);
  }
  close(fds[1]);
  ProbeResult r;
  const ssize_t n = read(fds[0], &r, sizeof(r));
  close(fds[0]);
  int wstatus = 0;
  waitpid(pid, &wstatus, 0);
  if (n != static_cast<ssize_t>(sizeof(r))) {
    return absl::InternalError("trainer user check: the probe process gave no answer");
  }
  if (r.index < 0) return absl::OkStatus();
  if (r.index == static_cast<int>(probes.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("--trainer_user ", user.name, ": cannot switch to it: ", strerror(r.error)));
  }
  return absl::InvalidArgumentError(Failure(user, probes[r.index], r.error));
}

}  // namespace shardline::worker
