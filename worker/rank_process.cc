#include "worker/rank_process.h"

#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

extern char** environ;

namespace shardline::worker {
namespace {

int ExitCodeFromWaitStatus(int wstatus) {
  if (WIFEXITED(wstatus)) return WEXITSTATUS(wstatus);
  if (WIFSIGNALED(wstatus)) return -WTERMSIG(wstatus);
  return -1;
}

}  // namespace

absl::StatusOr<std::unique_ptr<RankProcess>> RankProcess::Start(const Options& options) {
  if (options.argv.empty()) return absl::InvalidArgumentError("rank process: empty argv");
  if (access(options.argv[0].c_str(), X_OK) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("rank process: executable ", options.argv[0],
                                                   " is not runnable: ", strerror(errno)));
  }
  RankLog::Options lo;
  lo.path = options.log_path;
  lo.max_file_bytes = options.log_max_file_bytes;
  absl::StatusOr<std::unique_ptr<RankLog>> log = RankLog::Open(lo);
  if (!log.ok()) {
    return absl::InternalError(absl::StrCat("rank process: cannot open log file ", options.log_path,
                                            ": ", log.status().message()));
  }
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("rank process: pipe failed: ", strerror(errno)));
  }
  const int log_fd = pipe_fds[1];

  // Build argv and envp before fork: the child may only call async-signal-safe functions.
  std::vector<std::string> env_strings;
  std::map<std::string, std::string> merged;
  for (char** e = environ; *e != nullptr; ++e) {
    const char* eq = strchr(*e, '=');
    if (eq != nullptr) merged[std::string(*e, eq - *e)] = eq + 1;
  }
  for (const std::string& k : options.drop_env) merged.erase(k);
  for (const auto& [k, v] : options.env) merged[k] = v;
  for (const auto& [k, v] : merged) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_strings = options.argv;
  std::vector<char*> argv;
  for (auto& s : argv_strings) argv.push_back(s.data());
  argv.push_back(nullptr);
  const pid_t parent = getpid();

  const pid_t pid = fork();
  if (pid < 0) {
    close(pipe_fds[0]);
    close(log_fd);
    return absl::InternalError(absl::StrCat("rank process: fork failed: ", strerror(errno)));
  }
  if (pid == 0) {
    // Child. Own process group, so Terminate and Kill reach grandchildren too.
    setpgid(0, 0);
    // The daemon blocks SIGTERM and SIGINT in every thread (its sigwait thread takes them:
    // worker_main.cc), and a signal mask survives fork and execve: unblocked here, or a trainer
    // never sees the SIGTERM of a STOP and can only be SIGKILLed after the grace period (found
    // by //tests/integration:elastic_grow_scenario_test: a stopped attempt trained on, and
    // saved, for the whole grace period). Dispositions stay as inherited (an ignored SIGPIPE
    // keeps a trainer's write to a dead peer an error, not a kill).
    // SIGUSR1 (a preemption, Preempt) stays blocked: its default action kills, and the trainer
    // installs its handler only after loading LibTorch (a second or more); a PREEMPT in that
    // window waits, pending, until the trainer unblocks it.
    sigset_t preempt_only;
    sigemptyset(&preempt_only);
    sigaddset(&preempt_only, SIGUSR1);
    sigprocmask(SIG_SETMASK, &preempt_only, nullptr);
    dup2(log_fd, STDOUT_FILENO);
    dup2(log_fd, STDERR_FILENO);
    if (options.user.has_value() && DropToTrainerUser(*options.user) != 0) {
      static const char kMessage[] = "rank process: cannot switch to the trainer user\n";
      (void)!write(STDERR_FILENO, kMessage, sizeof(kMessage) - 1);
      _exit(125);
    }
    // Die with the daemon (set after the switch of user, which clears it); and if the daemon
    // already died between fork and here, go now.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    const int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, STDIN_FILENO);
    if (!options.working_dir.empty() && chdir(options.working_dir.c_str()) != 0) _exit(126);
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  close(log_fd);
  (*log)->Start(pipe_fds[0]);
  // Also set the group from the parent side: whichever runs first, the group exists before a stop.
  setpgid(pid, pid);
  return std::unique_ptr<RankProcess>(new RankProcess(pid, *std::move(log)));
}

RankProcess::~RankProcess() {
  if (!exit_code_.has_value()) {
    kill(-pid_, SIGKILL);
    kill(pid_, SIGKILL);
    int wstatus = 0;
    waitpid(pid_, &wstatus, 0);
  }
}

std::optional<int> RankProcess::Poll() {
  if (exit_code_.has_value()) return exit_code_;
  int wstatus = 0;
  const pid_t r = waitpid(pid_, &wstatus, WNOHANG);
  if (r == pid_) {
    exit_code_ = ExitCodeFromWaitStatus(wstatus);
    // Anything the rank left running in its group goes with it.
    kill(-pid_, SIGKILL);
  }
  return exit_code_;
}

std::optional<int> RankProcess::WaitFor(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    if (auto code = Poll(); code.has_value()) return code;
    if (absl::Now() >= deadline) return std::nullopt;
    absl::SleepFor(absl::Milliseconds(20));
  }
}

void RankProcess::Terminate() {
  if (exit_code_.has_value()) return;
  kill(-pid_, SIGTERM);
}

void RankProcess::Preempt() {
  if (exit_code_.has_value()) return;
  kill(pid_, SIGUSR1);
}

void RankProcess::Kill() {
  if (exit_code_.has_value()) return;
  kill(-pid_, SIGKILL);
  kill(pid_, SIGKILL);
}

std::string RankProcess::LogTail(size_t max_bytes) const {
  if (exit_code_.has_value()) log_->WaitForEnd(absl::Seconds(1));
  return log_->Tail(max_bytes);
}

std::string DescribeExit(int exit_code) {
  if (exit_code >= 0) return absl::StrCat("exited with code ", exit_code);
  const char* name = sigabbrev_np(-exit_code);
  return absl::StrCat("killed by SIG", name != nullptr ? name : std::to_string(-exit_code));
}

}  // namespace shardline::worker
