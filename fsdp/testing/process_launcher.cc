#include "fsdp/testing/process_launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "fsdp/tcp_kv_store.h"

extern char** environ;

namespace shardline::fsdp::testing {
namespace {

struct Child {
  pid_t pid = -1;
  int out_fd = -1;  // Read end of the rank's stdout+stderr pipe; -1 once at EOF.
  bool exited = false;
};

}  // namespace

bool RunRanksResult::AllSucceeded() const {
  for (const RankResult& r : ranks) {
    if (r.exit_code != 0) return false;
  }
  return !ranks.empty();
}

std::string RunRanksResult::Summary() const {
  std::string out;
  for (const RankResult& r : ranks) {
    constexpr size_t kTail = 4096;
    const std::string tail =
        r.output.size() > kTail ? "..." + r.output.substr(r.output.size() - kTail) : r.output;
    absl::StrAppend(&out, "---- rank ", r.rank, ": exit ", r.exit_code,
                    r.timed_out ? " (killed at timeout)" : "", "\n", tail, "\n");
  }
  return out;
}

std::string RunfilePath(const std::string& relative) {
  const char* srcdir = getenv("TEST_SRCDIR");
  const char* workspace = getenv("TEST_WORKSPACE");
  if (srcdir == nullptr) return relative;
  return absl::StrCat(srcdir, "/", workspace != nullptr ? workspace : "shardline", "/", relative);
}

RunRanksResult RunRanks(const std::string& binary, int world_size,
                        const std::vector<std::string>& extra_args, absl::Duration timeout) {
  RunRanksOptions options;
  options.timeout = timeout;
  return RunRanks(binary, world_size, extra_args, options);
}

RunRanksResult RunRanks(const std::string& binary, int world_size,
                        const std::vector<std::string>& extra_args,
                        const RunRanksOptions& options) {
  RunRanksResult result;
  result.ranks.resize(world_size);
  std::unique_ptr<TcpKvServer> server;
  if (options.start_store) {
    absl::StatusOr<std::unique_ptr<TcpKvServer>> created = TcpKvServer::Create({});
    if (!created.ok()) {
      for (int r = 0; r < world_size; ++r) {
        result.ranks[r].rank = r;
        result.ranks[r].output = absl::StrCat("RunRanks: ", created.status().ToString());
      }
      return result;
    }
    server = std::move(*created);
  }

  // Environment: ours plus options.env.
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) env_strings.push_back(*e);
  env_strings.insert(env_strings.end(), options.env.begin(), options.env.end());

  std::vector<Child> children(world_size);
  for (int r = 0; r < world_size; ++r) {
    result.ranks[r].rank = r;
    std::vector<std::string> args = {binary};
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    if (options.per_rank_args) {
      std::vector<std::string> more = options.per_rank_args(r);
      args.insert(args.end(), more.begin(), more.end());
    }
    args.push_back(absl::StrCat("--rank=", r));
    args.push_back(absl::StrCat("--world_size=", world_size));
    if (server != nullptr) {
      args.push_back("--store_host=127.0.0.1");
      args.push_back(absl::StrCat("--store_port=", server->port()));
    }
    // Everything the child needs is built before fork: between fork and exec only
    // async-signal-safe calls are allowed (this process may have other threads).
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<char*> envp;
    for (std::string& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);

    int pipe_fds[2];
    if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
      result.ranks[r].output = absl::StrCat("RunRanks: pipe: ", strerror(errno));
      continue;
    }
    pid_t pid = fork();
    if (pid == 0) {
      dup2(pipe_fds[1], STDOUT_FILENO);
      dup2(pipe_fds[1], STDERR_FILENO);
      execve(argv[0], argv.data(), envp.data());
      const char msg[] = "RunRanks: execve failed\n";
      (void)!write(STDERR_FILENO, msg, sizeof(msg) - 1);
      _exit(127);
    }
    close(pipe_fds[1]);
    if (pid < 0) {
      close(pipe_fds[0]);
      result.ranks[r].output = absl::StrCat("RunRanks: fork: ", strerror(errno));
      continue;
    }
    children[r].pid = pid;
    children[r].out_fd = pipe_fds[0];
  }

  const absl::Time deadline = absl::Now() + options.timeout;
  bool killed_all = false;
  while (true) {
    // Drain output of every rank still writing.
    std::vector<pollfd> fds;
    std::vector<int> fd_rank;
    for (int r = 0; r < world_size; ++r) {
      if (children[r].out_fd >= 0) {
        fds.push_back({children[r].out_fd, POLLIN, 0});
        fd_rank.push_back(r);
      }
    }
    // Reap exited children (their pipes may stay open if they spawned grandchildren).
    bool all_exited = true;
    for (int r = 0; r < world_size; ++r) {
      Child& c = children[r];
      if (c.pid < 0 || c.exited) continue;
      int status = 0;
      pid_t done = waitpid(c.pid, &status, WNOHANG);
      if (done == c.pid) {
        c.exited = true;
        result.ranks[r].exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
      } else {
        all_exited = false;
      }
    }
    if (fds.empty() && all_exited) break;
    if (!killed_all && absl::Now() >= deadline) {
      for (int r = 0; r < world_size; ++r) {
        if (children[r].pid > 0 && !children[r].exited) {
          kill(children[r].pid, SIGKILL);
          result.ranks[r].timed_out = true;
        }
      }
      killed_all = true;
    }
    if (fds.empty()) {
      absl::SleepFor(absl::Milliseconds(5));
      continue;
    }
    poll(fds.data(), fds.size(), 20);
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      const int r = fd_rank[i];
      char buf[65536];
      ssize_t n = read(children[r].out_fd, buf, sizeof(buf));
      if (n > 0) {
        result.ranks[r].output.append(buf, n);
      } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        close(children[r].out_fd);
        children[r].out_fd = -1;
      }
    }
    // After the kill, grandchildren could keep a pipe open forever: stop reading then.
    if (killed_all && absl::Now() >= deadline + absl::Seconds(5)) {
      for (Child& c : children) {
        if (c.out_fd >= 0) close(c.out_fd);
        c.out_fd = -1;
      }
    }
  }
  return result;
}

}  // namespace shardline::fsdp::testing
