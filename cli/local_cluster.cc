#include "cli/local_cluster.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/secret_file.h"
#include "common/status_macros.h"

namespace shardline::cli {
namespace {

namespace fs = std::filesystem;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string Tail(const std::string& text, size_t n) {
  return text.size() <= n ? text : text.substr(text.size() - n);
}

bool ProcessAlive(pid_t pid) { return pid > 0 && kill(pid, 0) == 0; }

// cluster.json is written and read only by shardctl; a flat object keeps the parser small.
std::string ToJson(const ClusterInfo& info) {
  std::vector<std::string> pids;
  for (pid_t p : info.worker_pids) pids.push_back(std::to_string(p));
  return absl::StrCat("{\n  \"coordinator_address\": \"", info.coordinator_address, "\",\n",
                      "  \"dashboard_address\": \"", info.dashboard_address, "\",\n",
                      "  \"metrics_address\": \"", info.metrics_address, "\",\n", "  \"token\": \"",
                      info.token, "\",\n", "  \"coordinator_pid\": ", info.coordinator_pid, ",\n",
                      "  \"worker_pids\": [", absl::StrJoin(pids, ", "), "]\n}\n");
}

absl::StatusOr<ClusterInfo> FromJson(const std::string& text, const std::string& path) {
  ClusterInfo info;
  std::smatch m;
  if (!std::regex_search(text, m, std::regex("\"coordinator_address\": \"([^\"]*)\""))) {
    return absl::DataLossError(absl::StrCat(path, ": no coordinator_address"));
  }
  info.coordinator_address = m[1];
  if (std::regex_search(text, m, std::regex("\"token\": \"([^\"]*)\""))) info.token = m[1];
  if (std::regex_search(text, m, std::regex("\"dashboard_address\": \"([^\"]*)\""))) {
    info.dashboard_address = m[1];
  }
  if (std::regex_search(text, m, std::regex("\"metrics_address\": \"([^\"]*)\""))) {
    info.metrics_address = m[1];
  }
  if (std::regex_search(text, m, std::regex("\"coordinator_pid\": (\\d+)"))) {
    info.coordinator_pid = std::stoi(m[1]);
  }
  if (std::regex_search(text, m, std::regex("\"worker_pids\": \\[([^\\]]*)\\]"))) {
    for (absl::string_view p : absl::StrSplit(std::string(m[1]), ',', absl::SkipWhitespace())) {
      int pid = 0;
      if (absl::SimpleAtoi(p, &pid)) info.worker_pids.push_back(pid);
    }
  }
  return info;
}

}  // namespace

absl::StatusOr<pid_t> SpawnDetached(const std::vector<std::string>& argv,
                                    const std::string& log_path) {
  if (argv.empty()) return absl::InvalidArgumentError("SpawnDetached: empty argv");
  std::vector<std::string> args = argv;
  std::vector<char*> cargv;
  for (auto& a : args) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  // Report the grandchild's pid to us through a pipe: the intermediate child exits at once so
  // the daemon is re-parented to init and never becomes our zombie.
  int fds[2];
  if (pipe(fds) != 0) return absl::InternalError(absl::StrCat("pipe: ", strerror(errno)));
  const pid_t child = fork();
  if (child < 0) return absl::InternalError(absl::StrCat("fork: ", strerror(errno)));
  if (child == 0) {
    close(fds[0]);
    setsid();
    const pid_t grandchild = fork();
    if (grandchild != 0) {
      ssize_t ignored = write(fds[1], &grandchild, sizeof(grandchild));
      (void)ignored;
      _exit(grandchild > 0 ? 0 : 1);
    }
    close(fds[1]);
    const int log = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    const int devnull = open("/dev/null", O_RDONLY);
    if (log >= 0) {
      dup2(log, STDOUT_FILENO);
      dup2(log, STDERR_FILENO);
    }
    if (devnull >= 0) dup2(devnull, STDIN_FILENO);
    execv(cargv[0], cargv.data());
    _exit(127);
  }
  close(fds[1]);
  pid_t pid = -1;
  const ssize_t n = read(fds[0], &pid, sizeof(pid));
  close(fds[0]);
  int wstatus = 0;
  waitpid(child, &wstatus, 0);
  if (n != sizeof(pid) || pid <= 0) {
    return absl::InternalError(absl::StrCat("could not start ", argv[0]));
  }
  return pid;
}

absl::StatusOr<std::string> FindSiblingBinary(const std::string& package, const std::string& name) {
  std::vector<std::string> looked;
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    // bazel-bin/cli/shardctl -> bazel-bin/<package>/<name>
    const fs::path bazel_layout = self.parent_path().parent_path() / package / name;
    const fs::path same_dir = self.parent_path() / name;
    for (const fs::path& p : {bazel_layout, same_dir}) {
      looked.push_back(p.string());
      if (access(p.c_str(), X_OK) == 0) return p.string();
    }
  }
  const char* path_env = getenv("PATH");
  for (absl::string_view dir : absl::StrSplit(path_env ? path_env : "", ':', absl::SkipEmpty())) {
    const fs::path p = fs::path(std::string(dir)) / name;
    if (access(p.c_str(), X_OK) == 0) return p.string();
  }
  looked.push_back("$PATH");
  return absl::NotFoundError(
      absl::StrCat("cannot find the ", name, " binary; looked in ", absl::StrJoin(looked, ", ")));
}

absl::StatusOr<ClusterInfo> ReadClusterInfo(const std::string& state_dir) {
  const std::string path = state_dir + "/cluster.json";
  if (access(path.c_str(), R_OK) != 0) {
    return absl::NotFoundError(absl::StrCat("no local cluster: ", path, " does not exist"));
  }
  RETURN_IF_ERROR(CheckOwnerOnlyFile(path, "local cluster"));  // it holds the user token
  ASSIGN_OR_RETURN(ClusterInfo info, FromJson(ReadFile(path), path));
  info.state_dir = state_dir;
  return info;
}

absl::StatusOr<ClusterInfo> StartLocalCluster(const ClusterOptions& options) {
  if (auto existing = ReadClusterInfo(options.state_dir); existing.ok()) {
    if (ProcessAlive(existing->coordinator_pid)) {
      return absl::FailedPreconditionError(
          absl::StrCat("a local cluster is already running from ", options.state_dir,
                       " (coordinator pid ", existing->coordinator_pid, ", ",
                       existing->coordinator_address, "); run `shardctl cluster down` first"));
    }
  }
  std::error_code ec;
  fs::create_directories(options.state_dir + "/coordinator", ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("cannot create ", options.state_dir, ": ", ec.message()));
  }
  ClusterInfo info;
  info.state_dir = fs::absolute(options.state_dir).string();
  // Fresh random tokens for each start: a user token for shardctl (kept in cluster.json) and a
  // distinct worker token, so that other local users of a shared machine can do nothing, and a
  // trainer (which holds the worker token) cannot submit or cancel jobs. Both reach the
  // processes as 0600 files, never on a command line.
  info.token = RandomToken();
  const std::string user_token_file = info.state_dir + "/coordinator/user.token";
  const std::string worker_token_file = info.state_dir + "/worker.token";
  RETURN_IF_ERROR(WriteOwnerOnlyFile(user_token_file, info.token + "\n"));
  RETURN_IF_ERROR(WriteOwnerOnlyFile(worker_token_file, RandomToken() + "\n"));
  const std::string coord_log = info.state_dir + "/coordinator/coordinator.log";
  unlink(coord_log.c_str());
  ASSIGN_OR_RETURN(
      info.coordinator_pid,
      SpawnDetached({options.coordinator_bin, "--listen=127.0.0.1:0",
                     "--state_dir=" + info.state_dir + "/coordinator",
                     "--token_file=" + user_token_file, "--worker_token_file=" + worker_token_file,
                     "--dashboard_listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0"},
                    coord_log));

  // The coordinator prints "listening on HOST:PORT" once its port is bound, after the
  // metrics' "metrics on HOST:PORT" and the dashboard's "dashboard on http://HOST:PORT/".
  const absl::Time deadline = absl::Now() + options.start_timeout;
  const std::regex listening("listening on ([^\\s]+)");
  const std::regex dashboard("dashboard on http://([^\\s/]+)/");
  const std::regex metrics("metrics on ([^\\s]+)");
  while (info.coordinator_address.empty()) {
    std::smatch m;
    const std::string log = ReadFile(coord_log);
    if (std::regex_search(log, m, listening)) {
      info.coordinator_address = m[1];
      if (std::regex_search(log, m, dashboard)) info.dashboard_address = m[1];
      if (std::regex_search(log, m, metrics)) info.metrics_address = m[1];
      break;
    }
    if (!ProcessAlive(info.coordinator_pid) || absl::Now() > deadline) {
      kill(info.coordinator_pid, SIGKILL);
      return absl::DeadlineExceededError(absl::StrCat("the coordinator did not start; the end of ",
                                                      coord_log, ":\n", Tail(log, 2000)));
    }
    absl::SleepFor(absl::Milliseconds(50));
  }

  for (int i = 0; i < options.workers; ++i) {
    const std::string dir = absl::StrCat(info.state_dir, "/worker-", i);
    fs::create_directories(dir, ec);
    ASSIGN_OR_RETURN(pid_t pid,
                     SpawnDetached({options.worker_bin, "--coordinator=" + info.coordinator_address,
                                    absl::StrCat("--node_name=local-", i),
                                    absl::StrCat("--slots=", options.slots_per_worker),
                                    "--work_dir=" + dir, "--trainer=" + options.trainer_bin,
                                    "--join_token_file=" + worker_token_file},
                                   dir + "/worker.log"));
    info.worker_pids.push_back(pid);
  }
  RETURN_IF_ERROR(WriteOwnerOnlyFile(info.state_dir + "/cluster.json", ToJson(info)));
  return info;
}

absl::Status StopLocalCluster(const std::string& state_dir, absl::Duration grace) {
  ASSIGN_OR_RETURN(ClusterInfo info, ReadClusterInfo(state_dir));
  std::vector<pid_t> pids = info.worker_pids;
  pids.push_back(info.coordinator_pid);
  // Workers first, so they stop their trainers while the coordinator still records it.
  for (pid_t p : pids) {
    if (ProcessAlive(p)) kill(p, SIGTERM);
  }
  const absl::Time deadline = absl::Now() + grace;
  for (pid_t p : pids) {
    while (ProcessAlive(p) && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(50));
    if (ProcessAlive(p)) kill(p, SIGKILL);
  }
  unlink((state_dir + "/cluster.json").c_str());
  return absl::OkStatus();
}

}  // namespace shardline::cli
