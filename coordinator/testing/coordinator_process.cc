#include "coordinator/testing/coordinator_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace shardline::coordinator {
namespace {

std::string Tail(const std::string& path) {
  if (path.empty()) return "";
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  std::string text = s.str();
  return text.size() > 2000 ? text.substr(text.size() - 2000) : text;
}

// Waits for `pid` until `deadline`; returns its wait status or -1.
int WaitUntil(pid_t pid, absl::Time deadline) {
  while (true) {
    int status = 0;
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (r < 0 && errno != EINTR) return -1;
    if (absl::Now() > deadline) return -1;
    absl::SleepFor(absl::Milliseconds(10));
  }
}

}  // namespace

std::string CoordinatorBinaryPath() {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  if (srcdir != nullptr && workspace != nullptr) {
    return absl::StrCat(srcdir, "/", workspace, "/coordinator/coordinator");
  }
  return "coordinator/coordinator";
}

absl::StatusOr<std::unique_ptr<CoordinatorProcess>> CoordinatorProcess::Start(
    const Options& options) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  std::vector<std::string> argv_s = {options.binary};
  argv_s.insert(argv_s.end(), options.args.begin(), options.args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  if (pid == 0) {
    // Child: stdout to the pipe; die with the test.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    dup2(fds[1], STDOUT_FILENO);
    if (!options.stderr_path.empty()) {
      const int err = open(options.stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (err >= 0) dup2(err, STDERR_FILENO);
    }
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(fds[1]);
  std::unique_ptr<CoordinatorProcess> p(new CoordinatorProcess());
  p->pid_ = pid;
  p->stdout_fd_ = fds[0];
  const absl::Time deadline = absl::Now() + options.start_timeout;
  std::string out;
  while (true) {
    const size_t nl = out.find('\n');
    if (nl != std::string::npos) {
      const std::string line = out.substr(0, nl);
      out.erase(0, nl + 1);
      if (absl::StartsWith(line, "listening on ")) {
        p->address_ = line.substr(strlen("listening on "));
        return p;
      }
      if (absl::StartsWith(line, "metrics on ")) {
        p->metrics_address_ = line.substr(strlen("metrics on "));
      }
      continue;
    }
    const int64_t left_ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (left_ms <= 0) {
      return absl::DeadlineExceededError(absl::StrCat(options.binary, " printed no address in ",
                                                      absl::FormatDuration(options.start_timeout),
                                                      "; stderr: ", Tail(options.stderr_path)));
    }
    pollfd pfd{p->stdout_fd_, POLLIN, 0};
    if (poll(&pfd, 1, static_cast<int>(left_ms)) <= 0) continue;
    char buf[512];
    const ssize_t n = read(p->stdout_fd_, buf, sizeof(buf));
    if (n > 0) {
      out.append(buf, n);
      continue;
    }
    // EOF: the child exited (or closed stdout) before serving.
    const int status = WaitUntil(pid, absl::Now() + absl::Seconds(10));
    p->pid_ = -1;
    return absl::UnavailableError(absl::StrCat(options.binary, " exited before serving (",
                                               status >= 0 && WIFEXITED(status)
                                                   ? absl::StrCat("exit code ", WEXITSTATUS(status))
                                                   : absl::StrCat("wait status ", status),
                                               "); stderr: ", Tail(options.stderr_path)));
  }
}

absl::StatusOr<int> CoordinatorProcess::Signal(int sig, absl::Duration timeout) {
  if (pid_ < 0) return absl::FailedPreconditionError("coordinator process is not running");
  kill(pid_, sig);
  const int status = WaitUntil(pid_, absl::Now() + timeout);
  if (status < 0) {
    return absl::DeadlineExceededError(absl::StrCat(
        "coordinator pid ", pid_, " did not exit within ", absl::FormatDuration(timeout)));
  }
  pid_ = -1;
  return status;
}

CoordinatorProcess::~CoordinatorProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    WaitUntil(pid_, absl::Now() + absl::Seconds(10));
  }
  if (stdout_fd_ >= 0) close(stdout_fd_);
}

}  // namespace shardline::coordinator
