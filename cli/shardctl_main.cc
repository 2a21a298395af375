// shardctl: the Shardline command-line client.
//
//   shardctl cluster up [--state_dir=.cluster] [--workers=2] [--slots=2]
//   shardctl cluster down [--state_dir=.cluster]
//   shardctl submit SPEC [--set path=value ...] [--watch] [--dry_run]
//   shardctl status JOB | list | workers | checkpoints JOB     (each takes --json)
//   shardctl watch JOB
//   shardctl logs JOB [--rank=N] [--follow]
//   shardctl cancel JOB
//   shardctl export JOB --out=FILE.safetensors [--step=N]
//   shardctl export JOB --format=hf --out=DIR [--step=N]   (a transformers folder: hf/export.h)
//
// Where the coordinator is: --coordinator, else $SHARDLINE_COORDINATOR, else the config file
// (--config, default ~/.shardline/config, lines "coordinator=HOST:PORT" and "token=..."), else
// the local cluster started by `cluster up` (<state_dir>/cluster.json). The user token likewise:
// --token, $SHARDLINE_TOKEN, the config file, the local cluster.
//
// Exit codes (also in --help):
//   0 success (for submit --watch and watch: the job SUCCEEDED)
//   1 the watched job FAILED or was CANCELLED
//   2 usage error (unknown command, missing argument)
//   3 invalid job spec (the message names the field and value)
//   4 the coordinator is unreachable
//   5 not found (job, checkpoint, cluster)
//   6 refused: UNAUTHENTICATED or PERMISSION_DENIED
//   7 any other error
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "checkpoint/safetensors.h"
#include "cli/local_cluster.h"
#include "cli/progress_view.h"
#include "coordinator/client.h"
#include "google/protobuf/util/json_util.h"
#include "hf/export.h"
#include "spec/hf_config.h"
#include "spec/job_spec.h"

ABSL_FLAG(std::string, coordinator, "", "Coordinator host:port.");
ABSL_FLAG(std::string, token, "", "User bearer token.");
ABSL_FLAG(std::string, config, "", "Config file (default ~/.shardline/config).");
ABSL_FLAG(std::string, state_dir, ".cluster", "Local cluster state directory.");
ABSL_FLAG(int, workers, 2, "cluster up: worker daemons to start.");
ABSL_FLAG(int, slots, 2, "cluster up: CPU slots per worker.");
ABSL_FLAG(bool, json, false, "Read commands: print JSON instead of text.");
ABSL_FLAG(bool, watch, false, "submit: watch the job until it ends.");
ABSL_FLAG(bool, dry_run, false,
          "submit: print the resolved spec (presets, defaults, overrides, absolute paths) and "
          "submit nothing.");
ABSL_FLAG(int, rank, -1, "logs: only this rank (default: all).");
ABSL_FLAG(bool, follow, false, "logs: keep printing new lines until the job ends.");
ABSL_FLAG(int64_t, step, -1, "export: checkpoint step (default: the latest committed).");
ABSL_FLAG(std::string, out, "", "export: output .safetensors file (--format=hf: folder).");
ABSL_FLAG(std::string, format, "safetensors",
          "export: safetensors (Shardline's names, one file) or hf (a Hugging Face transformers "
          "folder: config.json + model.safetensors, GPT and LLAMA models).");
ABSL_FLAG(int, timeout_s, 10, "Deadline of each call to the coordinator, seconds.");
ABSL_FLAG(bool, check_flags, false, "Parse the flags and exit (used by deploy tests).");

namespace shardline::cli {
namespace {

namespace fs = std::filesystem;
using coordinator::CoordinatorClient;

constexpr char kUsageText[] = R"(shardctl: submit, watch and inspect Shardline FSDP training jobs.

Commands:
  cluster up | down              start/stop a local coordinator + workers (--state_dir, --workers, --slots)
  submit SPEC [--set k=v]...     validate SPEC locally, submit it, print the job id (--watch to follow;
                                 --dry_run: print the resolved spec as YAML, or JSON with --json, and stop)
  status JOB                     state, progress, placement, events, sample
  list                           all jobs, one line each
  watch JOB                      live progress until the job ends
  logs JOB [--rank=N] [--follow] rank logs (local cluster)
  cancel JOB                     stop every rank of the job
  checkpoints JOB                committed checkpoints of the job
  export JOB --out=F [--step=N]  the model of a committed checkpoint as one .safetensors file
                                 (--format=hf --out=DIR: a folder transformers loads)
  workers                        registered workers and their slots
Read commands take --json. Coordinator: --coordinator, $SHARDLINE_COORDINATOR, the config file,
or the local cluster; token: --token, $SHARDLINE_TOKEN, the config file, or the local cluster.

Exit codes: 0 ok (watched job SUCCEEDED); 1 watched job FAILED or CANCELLED; 2 usage; 3 invalid
spec; 4 coordinator unreachable; 5 not found; 6 unauthenticated or permission denied; 7 other.
)";

enum ExitCode {
  kOk = 0,
  kJobFailed = 1,
  kUsage = 2,
  kBadSpec = 3,
  kUnreachable = 4,
  kNotFound = 5,
  kRefused = 6,
  kOther = 7
};

int ExitFor(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kOk:
      return kOk;
    case absl::StatusCode::kInvalidArgument:
      return kBadSpec;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
      return kUnreachable;
    case absl::StatusCode::kNotFound:
      return kNotFound;
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kPermissionDenied:
      return kRefused;
    default:
      return kOther;
  }
}

int Fail(const absl::Status& s) {
  std::cerr << "shardctl: " << s.message() << "\n";
  if (s.code() == absl::StatusCode::kUnavailable) {
    std::cerr << "shardctl: is the coordinator running? (`shardctl cluster up` starts a local "
                 "one; --coordinator or $SHARDLINE_COORDINATOR name another)\n";
  }
  return ExitFor(s);
}

std::string ToJson(const google::protobuf::Message& m) {
  google::protobuf::util::JsonPrintOptions o;
  o.preserve_proto_field_names = true;
  o.add_whitespace = true;
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(m, &out, o);
  return out;
}

struct Target {
  std::string address;
  std::string token;
};

// Flag, environment, config file, local cluster — the first that names the coordinator wins.
absl::StatusOr<Target> ResolveTarget() {
  Target t{absl::GetFlag(FLAGS_coordinator), absl::GetFlag(FLAGS_token)};
  auto fill = [&t](const std::string& address, const std::string& token) {
    if (t.address.empty()) t.address = address;
    if (t.token.empty()) t.token = token;
  };
  const char* env_addr = std::getenv("SHARDLINE_COORDINATOR");
  const char* env_token = std::getenv("SHARDLINE_TOKEN");
  fill(env_addr ? env_addr : "", env_token ? env_token : "");
  std::string config = absl::GetFlag(FLAGS_config);
  if (config.empty() && std::getenv("HOME") != nullptr) {
    config = std::string(std::getenv("HOME")) + "/.shardline/config";
  }
  if (std::ifstream in(config); in) {
    std::string line, address, token;
    while (std::getline(in, line)) {
      absl::string_view v = line;
      if (absl::ConsumePrefix(&v, "coordinator="))
        address = std::string(absl::StripAsciiWhitespace(v));
      if (absl::ConsumePrefix(&v, "token=")) token = std::string(absl::StripAsciiWhitespace(v));
    }
    fill(address, token);
  }
  if (auto local = ReadClusterInfo(absl::GetFlag(FLAGS_state_dir)); local.ok()) {
    fill(local->coordinator_address, local->token);
  }
  if (t.address.empty()) {
    return absl::NotFoundError(
        "no coordinator: pass --coordinator=HOST:PORT, set $SHARDLINE_COORDINATOR, or start a "
        "local cluster with `shardctl cluster up`");
  }
  return t;
}

absl::StatusOr<std::unique_ptr<CoordinatorClient>> Connect() {
  auto target = ResolveTarget();
  if (!target.ok()) return target.status();
  CoordinatorClient::Options o;
  o.address = target->address;
  o.token = target->token;
  o.timeout = absl::Seconds(absl::GetFlag(FLAGS_timeout_s));
  return CoordinatorClient::Create(o);
}

int UsageError(const std::string& usage) {
  std::cerr << "shardctl: " << usage << "\n";
  return kUsage;
}

bool IsTerminal(JobState s) { return s == SUCCEEDED || s == FAILED || s == CANCELLED; }

// Follows the job until it ends. On a terminal: one line redrawn in place; otherwise a plain
// line per change of step or state.
int Watch(CoordinatorClient& client, const std::string& job_id) {
  const bool tty = isatty(STDOUT_FILENO);
  JobStatus last;
  std::string last_line;
  size_t events_shown = 0;
  const absl::Status s = client.WatchJob(job_id, [&](const JobStatus& st) {
    for (; events_shown < static_cast<size_t>(st.events_size()); ++events_shown) {
      const JobEvent& e = st.events(events_shown);
      if (tty && !last_line.empty()) std::cout << "\n";
      std::cout << "[" << e.kind() << "] " << e.message() << "\n";
      last_line.clear();
    }
    const std::string line = ProgressLine(st);
    if (line != last_line) {
      if (tty) {
        std::cout << "\r\033[K" << line << std::flush;
      } else {
        std::cout << line << "\n" << std::flush;
      }
      last_line = line;
    }
    last = st;
    return true;
  });
  if (tty) std::cout << "\n";
  if (!s.ok()) return Fail(s);
  if (!last.sample().empty()) std::cout << "sample:\n" << last.sample() << "\n";
  if (last.state() == SUCCEEDED) return kOk;
  std::cerr << "shardctl: job " << job_id << " " << JobStateName(last.state())
            << (last.message().empty() ? "" : ": " + last.message()) << "\n";
  return kJobFailed;
}

int CmdCluster(const std::vector<std::string>& args) {
  if (args.size() < 3) return UsageError("usage: shardctl cluster up|down");
  const std::string dir = absl::GetFlag(FLAGS_state_dir);
  if (args[2] == "down") {
    const absl::Status s = StopLocalCluster(dir, absl::Seconds(15));
    if (!s.ok()) return Fail(s);
    std::cout << "cluster in " << dir << " stopped\n";
    return kOk;
  }
  if (args[2] != "up") return UsageError("usage: shardctl cluster up|down");
  ClusterOptions o;
  o.state_dir = dir;
  o.workers = absl::GetFlag(FLAGS_workers);
  o.slots_per_worker = absl::GetFlag(FLAGS_slots);
  for (auto [bin, pkg, name] : {std::tuple{&o.coordinator_bin, "coordinator", "coordinator"},
                                std::tuple{&o.worker_bin, "worker", "worker"},
                                std::tuple{&o.trainer_bin, "trainer", "trainer"}}) {
    auto path = FindSiblingBinary(pkg, name);
    if (!path.ok()) return Fail(path.status());
    *bin = *path;
  }
  auto info = StartLocalCluster(o);
  if (!info.ok()) return Fail(info.status());
  // Wait until every worker registered, so a submit right after `cluster up` can be placed.
  auto client = CoordinatorClient::Create(info->coordinator_address, info->token);
  if (!client.ok()) return Fail(client.status());
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  size_t alive = 0;
  while (absl::Now() < deadline) {
    auto workers = (*client)->ListWorkers();
    alive = 0;
    if (workers.ok()) {
      for (const WorkerInfo& w : *workers) alive += w.state() == WorkerInfo::ALIVE;
    }
    if (alive >= static_cast<size_t>(o.workers)) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  if (alive < static_cast<size_t>(o.workers)) {
    return Fail(absl::DeadlineExceededError(absl::StrCat("only ", alive, " of ", o.workers,
                                                         " workers registered; see ", dir,
                                                         "/worker-*/worker.log")));
  }
  std::cout << "cluster up: coordinator " << info->coordinator_address << ", " << o.workers
            << " workers x " << o.slots_per_worker << " CPU slots (state in " << info->state_dir
            << ")\n";
  return kOk;
}

int CmdSubmit(const std::vector<std::string>& args, const std::vector<std::string>& sets) {
  if (args.size() < 3) return UsageError("usage: shardctl submit SPEC [--set k=v]");
  spec::LoadOptions lo;
  lo.overrides = sets;
  // Local validation first: a bad spec never reaches the cluster. Paths become absolute.
  auto job_spec = spec::LoadJobSpecFile(args[2], lo);
  if (!job_spec.ok()) return Fail(job_spec.status());
  if (absl::GetFlag(FLAGS_dry_run)) {
    std::cout << (absl::GetFlag(FLAGS_json) ? spec::JobSpecToJson(*job_spec)
                                            : spec::JobSpecToYaml(*job_spec));
    return kOk;
  }
  auto client = Connect();
  if (!client.ok()) return Fail(client.status());
  auto job_id = (*client)->SubmitJob(*job_spec);
  if (!job_id.ok()) return Fail(job_id.status());
  std::cout << *job_id << "\n" << std::flush;
  if (absl::GetFlag(FLAGS_watch)) return Watch(**client, *job_id);
  return kOk;
}

int CmdStatus(const std::vector<std::string>& args) {
  if (args.size() < 3) return UsageError("usage: shardctl status JOB");
  auto client = Connect();
  if (!client.ok()) return Fail(client.status());
  auto st = (*client)->GetJob(args[2]);
  if (!st.ok()) return Fail(st.status());
  std::cout << (absl::GetFlag(FLAGS_json) ? ToJson(*st) : StatusBlock(*st));
  return kOk;
}

int CmdList() {
  auto client = Connect();
  if (!client.ok()) return Fail(client.status());
  auto jobs = (*client)->ListJobs();
  if (!jobs.ok()) return Fail(jobs.status());
  if (absl::GetFlag(FLAGS_json)) {
    ListJobsResponse r;
    for (const JobStatus& j : *jobs) *r.add_jobs() = j;
    std::cout << ToJson(r);
    return kOk;
  }
  std::cout << absl::StrFormat("%-14s %-24s %s\n", "JOB", "NAME", "PROGRESS");
  for (const JobStatus& j : *jobs) {
    std::cout << absl::StrFormat("%-14s %-24s %s\n", j.job_id(), j.spec().name(),
                                 ProgressLine(j, 10));
  }
  return kOk;
}

int CmdWorkers() {
  auto client = Connect();
  if (!client.ok()) return Fail(client.status());
  auto workers = (*client)->ListWorkers();
  if (!workers.ok()) return Fail(workers.status());
  if (absl::GetFlag(FLAGS_json)) {
    ListWorkersResponse r;
    for (const WorkerInfo& w : *workers) *r.add_workers() = w;
    std::cout << ToJson(r);
    return kOk;
  }
  std::cout << absl::StrFormat("%-16s %-14s %-16s %-6s %s\n", "WORKER", "NODE", "ADDRESS", "STATE",
                               "SLOTS");
  for (const WorkerInfo& w : *workers) {
    std::string kind = w.slots_size() > 0 ? Slot::Kind_Name(w.slots(0).kind()) : "-";
    std::cout << absl::StrFormat("%-16s %-14s %-16s %-6s %d %s (%d busy)\n", w.worker_id(),
                                 w.node_name(), w.address(), WorkerInfo::State_Name(w.state()),
                                 w.slots_size(), kind, w.busy_slots());
  }
  return kOk;
}

int CmdCheckpoints(const std::vector<std::string>& args) {
  if (args.size() < 3) return UsageError("usage: shardctl checkpoints JOB");
  auto client = Connect();
  if (!client.ok()) return Fail(client.status());
  auto cps = (*client)->ListCheckpoints(args[2]);
  if (!cps.ok()) return Fail(cps.status());
  if (absl::GetFlag(FLAGS_json)) {
    ListCheckpointsResponse r;
    for (const CheckpointInfo& c : *cps) *r.add_checkpoints() = c;
    std::cout << ToJson(r);
    return kOk;
  }
  std::cout << absl::StrFormat("%-8s %-10s %-6s %-20s %s\n", "STEP", "COMMITTED", "WORLD",
                               "STRATEGY", "PATH");
  for (const CheckpointInfo& c : *cps) {
    std::cout << absl::StrFormat("%-8d %-10s %-6d %-20s %s\n", c.step(),
                                 c.committed() ? "yes" : "no", c.world_size(),
                                 c.sharding_strategy(), c.path());
  }
  if (cps->empty()) std::cout << "(no checkpoints)\n";
  return kOk;
}

// The coordinator knows where each committed checkpoint is; the files are read from here, so the
// checkpoint directory must be visible on this machine (a shared file system, or a local cluster).
int CmdExport(const std::vector<std::string>& args) {
  if (args.size() < 3 || absl::GetFlag(FLAGS_out).empty()) {
    return UsageError(
        "usage: shardctl export JOB --out=FILE.safetensors [--step=N] [--format=safetensors|hf]");
  }
  const std::string format = absl::GetFlag(FLAGS_format);
  if (format != "safetensors" && format != "hf") {
    return UsageError(absl::StrCat("export: --format=", format, " is not safetensors or hf"));
  }
  auto client = Connect();
  if (!client.ok()) return Fail(client.status());
  auto cps = (*client)->ListCheckpoints(args[2]);
  if (!cps.ok()) return Fail(cps.status());
  const int64_t want = absl::GetFlag(FLAGS_step);
  const CheckpointInfo* chosen = nullptr;
  for (const CheckpointInfo& c : *cps) {
    if (!c.committed()) continue;
    if (want >= 0 ? c.step() == want : (chosen == nullptr || c.step() > chosen->step()))
      chosen = &c;
  }
  if (chosen == nullptr) {
    return Fail(absl::NotFoundError(
        want >= 0 ? absl::StrCat("job ", args[2], " has no committed checkpoint at step ", want)
                  : absl::StrCat("job ", args[2], " has no committed checkpoint")));
  }
  const std::string root = fs::path(chosen->path()).parent_path().string();
  absl::Status s;
  if (format == "hf") {
    // The checkpoint does not record head counts or rope theta: the job's spec gives them (a
    // model.hf_dir is read here, so it must be visible on this machine like the checkpoint).
    auto job = (*client)->GetJob(args[2]);
    if (!job.ok()) return Fail(job.status());
    ModelSpec model = job->spec().model();
    s = spec::ResolveHfModel(&model);
    if (s.ok()) s = hf::ExportHfFromStepDir(chosen->path(), model, absl::GetFlag(FLAGS_out));
  } else {
    s = checkpoint::ExportSafetensors(root, chosen->step(), absl::GetFlag(FLAGS_out));
  }
  if (!s.ok()) return Fail(s);
  std::cout << "wrote " << absl::GetFlag(FLAGS_out) << " (step " << chosen->step() << " of "
            << args[2] << ")\n";
  return kOk;
}

int CmdCancel(const std::vector<std::string>& args) {
  if (args.size() < 3) return UsageError("usage: shardctl cancel JOB");
  auto client = Connect();
  if (!client.ok()) return Fail(client.status());
  const absl::Status s = (*client)->CancelJob(args[2], "cancelled by shardctl");
  if (!s.ok()) return Fail(s);
  std::cout << "cancelled " << args[2] << "\n";
  return kOk;
}

int CmdWatch(const std::vector<std::string>& args) {
  if (args.size() < 3) return UsageError("usage: shardctl watch JOB");
  auto client = Connect();
  if (!client.ok()) return Fail(client.status());
  return Watch(**client, args[2]);
}

// Rank logs live on the workers' disks; for a local cluster they are under the state dir:
// <state_dir>/worker-*/jobs/<job>/attempt-<a>/rank-<r>.log.
int CmdLogs(const std::vector<std::string>& args) {
  if (args.size() < 3) return UsageError("usage: shardctl logs JOB [--rank=N] [--follow]");
  const std::string job = args[2];
  const std::string dir = absl::GetFlag(FLAGS_state_dir);
  const int only_rank = absl::GetFlag(FLAGS_rank);
  std::map<std::string, std::streamoff> offsets;
  auto print_new = [&]() {
    std::error_code ec;
    std::vector<fs::path> files;
    for (const auto& w : fs::directory_iterator(dir, ec)) {
      const fs::path jobdir = w.path() / "jobs" / job;
      if (!fs::is_directory(jobdir, ec)) continue;
      for (const auto& f : fs::recursive_directory_iterator(jobdir, ec)) {
        const std::string name = f.path().filename().string();
        if (!absl::StartsWith(name, "rank-") || !absl::EndsWith(name, ".log")) continue;
        if (only_rank >= 0 && name != absl::StrCat("rank-", only_rank, ".log")) continue;
        files.push_back(f.path());
      }
    }
    std::sort(files.begin(), files.end());
    for (const fs::path& f : files) {
      std::ifstream in(f);
      in.seekg(offsets[f.string()]);
      std::string line;
      const std::string label = f.parent_path().filename().string() + "/" + f.stem().string();
      while (std::getline(in, line)) std::cout << label << "| " << line << "\n";
      in.clear();
      offsets[f.string()] = in.tellg();
    }
    return files.size();
  };
  if (print_new() == 0 && !absl::GetFlag(FLAGS_follow)) {
    return Fail(absl::NotFoundError(
        absl::StrCat("no rank logs of job ", job, " under ", dir,
                     "/worker-*/jobs (logs are read from the local cluster's state dir)")));
  }
  if (!absl::GetFlag(FLAGS_follow)) return kOk;
  auto client = Connect();
  if (!client.ok()) return Fail(client.status());
  while (true) {
    std::cout << std::flush;
    auto st = (*client)->GetJob(job);
    print_new();
    if (!st.ok()) return Fail(st.status());
    if (IsTerminal(st->state())) return kOk;
    absl::SleepFor(absl::Milliseconds(500));
  }
}

}  // namespace
}  // namespace shardline::cli

int main(int argc, char** argv) {
  using namespace shardline::cli;
  absl::SetProgramUsageMessage(kUsageText);
  // --set may repeat, which absl flags do not keep; take those out before absl parses the rest.
  std::vector<std::string> sets;
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--set" && i + 1 < argc) {
      sets.push_back(argv[++i]);
    } else if (absl::StartsWith(a, "--set=")) {
      sets.push_back(a.substr(6));
    } else {
      rest.push_back(argv[i]);
    }
  }
  std::vector<char*> positional =
      absl::ParseCommandLine(static_cast<int>(rest.size()), rest.data());
  if (absl::GetFlag(FLAGS_check_flags)) return kOk;
  std::vector<std::string> args(positional.begin(), positional.end());
  if (args.size() < 2) {
    std::cerr << kUsageText;
    return kUsage;
  }
  const std::string& cmd = args[1];
  if (cmd == "cluster") return CmdCluster(args);
  if (cmd == "submit") return CmdSubmit(args, sets);
  if (cmd == "status") return CmdStatus(args);
  if (cmd == "list") return CmdList();
  if (cmd == "watch") return CmdWatch(args);
  if (cmd == "logs") return CmdLogs(args);
  if (cmd == "cancel") return CmdCancel(args);
  if (cmd == "checkpoints") return CmdCheckpoints(args);
  if (cmd == "workers") return CmdWorkers();
  if (cmd == "export") return CmdExport(args);
  std::cerr << "shardctl: unknown command \"" << cmd << "\"\n\n" << kUsageText;
  return kUsage;
}
