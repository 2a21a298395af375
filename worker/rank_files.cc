#include "worker/rank_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"

namespace shardline::worker {
namespace {

absl::Status Failed(const std::string& what, const std::string& path) {
  return absl::InternalError(absl::StrCat("cannot ", what, " ", path, ": ", strerror(errno)));
}

// The directory root:<group> 0750 (nothing to do without a trainer user).
absl::Status RestrictDir(const std::string& dir, const std::optional<TrainerUser>& user) {
  if (!user.has_value()) return absl::OkStatus();
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return Failed("open", dir);
  const bool ok = fchown(fd, 0, user->gid) == 0 && fchmod(fd, 0750) == 0;
  const int saved = errno;
  close(fd);
  errno = saved;
  return ok ? absl::OkStatus() : Failed("restrict", dir);
}

// Creates (or truncates) `path` with `mode`, owned by uid:gid, holding `text`.
absl::Status WriteOwned(const std::string& path, const std::string& text, mode_t mode, uid_t uid,
                        gid_t gid, bool chown_it) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd < 0) return Failed("write", path);
  bool ok = !chown_it || (fchown(fd, uid, gid) == 0 && fchmod(fd, mode) == 0);
  for (size_t done = 0; ok && done < text.size();) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) done += n;
  }
  const int saved = errno;
  close(fd);
  errno = saved;
  return ok ? absl::OkStatus() : Failed("write", path);
}

}  // namespace

RankFiles RankFilesFor(const std::string& attempt_dir, int rank, int generation) {
  // Generation 0 keeps the names from before replacements existed.
  const std::string tag =
      generation > 0 ? absl::StrCat(rank, ".gen", generation) : absl::StrCat(rank);
  RankFiles f;
  f.spec = absl::StrCat(attempt_dir, "/spec-rank-", tag, ".yaml");
  f.metrics = absl::StrCat(attempt_dir, "/metrics-rank-", tag, ".jsonl");
  f.log = absl::StrCat(attempt_dir, "/rank-", tag, ".log");
  return f;
}

absl::Status PrepareRankFiles(const std::string& job_dir, const std::string& attempt_dir,
                              const RankFiles& files, const std::string& spec_text,
                              const std::optional<TrainerUser>& user) {
  std::error_code ec;
  std::filesystem::create_directories(attempt_dir, ec);
  if (ec) {
    return absl::InternalError(absl::StrCat("cannot create ", attempt_dir, ": ", ec.message()));
  }
  if (absl::Status s = RestrictDir(job_dir, user); !s.ok()) return s;
  if (absl::Status s = RestrictDir(attempt_dir, user); !s.ok()) return s;
  const bool as_user = user.has_value();
  if (absl::Status s = WriteOwned(files.spec, spec_text, as_user ? 0640 : 0644, 0,
                                  as_user ? user->gid : 0, as_user);
      !s.ok()) {
    return s;
  }
  if (unlink(files.metrics.c_str()) != 0 && errno != ENOENT) return Failed("remove", files.metrics);
  if (!as_user) return absl::OkStatus();
  return WriteOwned(files.metrics, "", 0640, user->uid, user->gid, true);
}

}  // namespace shardline::worker
