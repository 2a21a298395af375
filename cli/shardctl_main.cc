// shardctl: the Shardline command-line client.
//
//   shardctl cluster up [--state_dir=.cluster] [--workers=2] [--slots=2]
//   shardctl cluster down [--state_dir=.cluster]
//   shardctl submit SPEC [--set path=value ...] [--watch] [--dry_run]
//   shardctl status JOB | list | workers | checkpoints JOB | whoami   (each takes --json)
//   shardctl watch JOB [--json]
//   shardctl logs JOB [--rank=N|--all] [--follow] [--tail=K] [--since=10m|RFC3339]
//   shardctl metrics JOB [--json]
//   shardctl cancel JOB
//   shardctl export JOB --out=FILE.safetensors [--step=N]
//   shardctl export JOB --format=hf --out=DIR [--step=N]   (a transformers folder: hf/export.h)
//
// Where the coordinator is: --coordinator, else $SHARDLINE_COORDINATOR, else the config file
// (--config, default ~/.shardline/config, lines "coordinator=HOST:PORT" and "token=..."), else
// the local cluster started by `cluster up` (<state_dir>/cluster.json). The user token likewise:
// --token_file, --token, $SHARDLINE_TOKEN, the config file, the local cluster. TLS: --tls_ca,
// --tls_cert, --tls_key, --insecure, else the config file's tls_ca=, tls_cert=, tls_key=,
// insecure=true. A config file or cluster.json holding a token must be mode 0600. Without TLS
// a token is never sent to a non-loopback coordinator unless --insecure (or insecure=true).
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

#include <algorithm>
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
#include "common/secret_file.h"
#include "common/status_macros.h"
#include "coordinator/client.h"
#include "coordinator/client_tls.h"
#include "google/protobuf/util/json_util.h"
#include "hf/export.h"
#include "spec/hf_config.h"
#include "spec/job_spec.h"

ABSL_FLAG(std::string, coordinator, "", "Coordinator host:port.");
ABSL_FLAG(std::string, token, "",
          "User bearer token (visible in the process list: prefer --token_file or "
          "$SHARDLINE_TOKEN).");
ABSL_FLAG(std::string, token_file, "", "File holding the user token (mode 0600).");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA file to verify the coordinator's certificate: connect with TLS.");
ABSL_FLAG(std::string, tls_cert, "", "PEM client certificate (mutual TLS), with --tls_key.");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert.");
ABSL_FLAG(bool, insecure, false,
          "Allow sending the token without TLS to a non-loopback coordinator (trusted networks "
          "only).");
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
ABSL_FLAG(bool, all, false, "logs: every rank (the default without --rank).");
ABSL_FLAG(bool, follow, false, "logs: keep printing new lines until the job ends.");
ABSL_FLAG(int, tail, 0, "logs: only the last K lines of each rank (0: all the coordinator keeps).");
ABSL_FLAG(std::string, since, "",
          "logs: only lines from this long ago (a duration: 90s, 10m, 2h) or since this time "
          "(RFC 3339, 2026-01-31T12:00:00Z).");
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
  watch JOB                      live progress until the job ends (--json: one JSON object per update)
  logs JOB [--rank=N|--all]      rank logs from the coordinator (--follow, --tail=K, --since=10m)
  metrics JOB                    the job's training series: loss, val loss, lr, grad norm, tokens/s...
  cancel JOB                     stop every rank of the job
  checkpoints JOB                committed checkpoints of the job
  export JOB --out=F [--step=N]  the model of a committed checkpoint as one .safetensors file
                                 (--format=hf --out=DIR: a folder transformers loads)
  workers                        registered workers and their slots
  whoami                         the user (and admin or not) the coordinator takes the token for
Read commands take --json. Coordinator: --coordinator, $SHARDLINE_COORDINATOR, the config file,
or the local cluster; token: --token_file, --token, $SHARDLINE_TOKEN, the config file, or the
local cluster. TLS: --tls_ca=CA.pem [--tls_cert, --tls_key], or tls_ca= etc. in the config file;
a token goes to a non-loopback coordinator only over TLS, or with --insecure.

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

// Whether Connect() configured TLS, for the hint on an unreachable coordinator.
bool g_tls = false;

int Fail(const absl::Status& s) {
  std::cerr << "shardctl: " << s.message() << "\n";
  if (s.code() == absl::StatusCode::kUnavailable) {
    std::cerr << "shardctl: is the coordinator running? (`shardctl cluster up` starts a local "
                 "one; --coordinator or $SHARDLINE_COORDINATOR name another)\n";
    if (!g_tls) {
      std::cerr << "shardctl: if the coordinator serves TLS, pass --tls_ca=CA.pem (or tls_ca= "
                   "in the config file)\n";
    }
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
  coordinator::ClientTlsFiles tls;
};

// "true"/"1" (config file booleans).
bool IsTrue(absl::string_view v) { return v == "true" || v == "1" || v == "yes"; }

// Flag, environment, config file, local cluster — the first that names the coordinator wins;
// likewise the token. TLS settings: flags, then the config file.
absl::StatusOr<Target> ResolveTarget() {
  Target t{absl::GetFlag(FLAGS_coordinator), absl::GetFlag(FLAGS_token)};
  if (!absl::GetFlag(FLAGS_token_file).empty()) {
    if (!t.token.empty()) {
      return absl::InvalidArgumentError("give --token or --token_file, not both");
    }
    auto token = ReadTokenFile(absl::GetFlag(FLAGS_token_file), "--token_file");
    if (!token.ok()) return token.status();
    t.token = *token;
  }
  t.tls = {absl::GetFlag(FLAGS_tls_ca), absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key),
           absl::GetFlag(FLAGS_insecure)};
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
    coordinator::ClientTlsFiles tls;
    while (std::getline(in, line)) {
      absl::string_view v = line;
      auto value = [&v] { return std::string(absl::StripAsciiWhitespace(v)); };
      if (absl::ConsumePrefix(&v, "coordinator=")) address = value();
      if (absl::ConsumePrefix(&v, "token=")) token = value();
      if (absl::ConsumePrefix(&v, "tls_ca=")) tls.ca = value();
      if (absl::ConsumePrefix(&v, "tls_cert=")) tls.cert = value();
      if (absl::ConsumePrefix(&v, "tls_key=")) tls.key = value();
      if (absl::ConsumePrefix(&v, "insecure=")) tls.insecure = IsTrue(value());
    }
    if (!token.empty()) {
      RETURN_IF_ERROR(CheckOwnerOnlyFile(config, "config file"));  // it holds the token
    }
    fill(address, token);
    if (t.tls.ca.empty()) t.tls.ca = tls.ca;
    if (t.tls.cert.empty()) t.tls.cert = tls.cert;
    if (t.tls.key.empty()) t.tls.key = tls.key;
    t.tls.insecure = t.tls.insecure || tls.insecure;
  }
  if (t.address.empty() || t.token.empty()) {
    auto local = ReadClusterInfo(absl::GetFlag(FLAGS_state_dir));
    if (local.ok()) {
      fill(local->coordinator_address, local->token);
    } else if (local.status().code() != absl::StatusCode::kNotFound) {
      return local.status();  // e.g. a cluster.json others can read: say so, do not skip it
    }
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
  RETURN_IF_ERROR(coordinator::LoadClientTls(target->tls, coordinator::kClientTlsFlags, &o));
  g_tls = !o.tls_root_certs.empty();
  return CoordinatorClient::Create(o);
}

int UsageError(const std::string& usage) {
  std::cerr << "shardctl: " << usage << "\n";
  return kUsage;
}

// `m` as JSON on one line (watch --json: one object per line, for tools that read lines).
std::string ToJsonLine(const google::protobuf::Message& m) {
  google::protobuf::util::JsonPrintOptions o;
  o.preserve_proto_field_names = true;
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(m, &out, o);
  return out;
}

// watch --json: the job's status as one JSON line per update, until it ends.
int WatchJson(CoordinatorClient& client, const std::string& job_id) {
  JobState last = JOB_STATE_UNSPECIFIED;
  const absl::Status s = client.WatchJob(job_id, [&](const JobStatus& st) {
    std::cout << ToJsonLine(st) << "\n" << std::flush;
    last = st.state();
    return true;
  });
  if (!s.ok()) return Fail(s);
  return last == SUCCEEDED ? kOk : kJobFailed;
}

// Follows the job until it ends. On a terminal: one line redrawn in place; otherwise a plain
// line per change of step or state.
int Watch(CoordinatorClient& client, const std::string& job_id) {
  if (absl::GetFlag(FLAGS_json)) return WatchJson(client, job_id);
  const bool tty = isatty(STDOUT_FILENO);
  JobStatus last;
  std::string last_line;
  int64_t events_shown = 0;  // Counting the ones the coordinator dropped (events_dropped).
  const absl::Status s = client.WatchJob(job_id, [&](const JobStatus& st) {
    for (events_shown = std::max(events_shown, st.events_dropped());
         events_shown < st.events_dropped() + st.events_size(); ++events_shown) {
      const JobEvent& e = st.events(static_cast<int>(events_shown - st.events_dropped()));
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
  if (!info->dashboard_address.empty()) {
    std::cout << "dashboard: http://" << info->dashboard_address << "/ (open it once with ?token= "
              << "and the token in " << info->state_dir << "/coordinator/user.token)\n";
  }
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
  std::cout << absl::StrFormat("%-14s %-24s %-12s %s\n", "JOB", "NAME", "OWNER", "PROGRESS");
  for (const JobStatus& j : *jobs) {
    std::cout << absl::StrFormat("%-14s %-24s %-12s %s\n", j.job_id(), j.spec().name(),
                                 j.owner().empty() ? "-" : j.owner(), ProgressLine(j, 10));
  }
  return kOk;
}

int CmdWhoAmI() {
  auto client = Connect();
  if (!client.ok()) return Fail(client.status());
  auto me = (*client)->WhoAmI();
  if (!me.ok()) return Fail(me.status());
  if (absl::GetFlag(FLAGS_json)) {
    std::cout << ToJson(*me);
    return kOk;
  }
  if (!me->user().empty()) {
    std::cout << "user       " << me->user() << (me->admin() ? " (admin)" : "") << "\n";
  }
  std::cout << "credential " << me->credential() << "\n";
  if (!me->job_id().empty()) {
    std::cout << "attempt    " << me->job_id() << " attempt " << me->attempt() << "\n";
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

// Rank logs come from the coordinator (GetLogs): the worker daemons ship every rank's lines to
// it, so this works from any machine that reaches the coordinator, while the job runs (--follow)
// and after it ended.
int CmdLogs(const std::vector<std::string>& args) {
  if (args.size() < 3) {
    return UsageError(
        "usage: shardctl logs JOB [--rank=N|--all] [--follow] [--tail=K] [--since=10m]");
  }
  const int rank = absl::GetFlag(FLAGS_rank);
  if (rank >= 0 && absl::GetFlag(FLAGS_all))
    return UsageError("logs: --rank and --all exclude each other");
  if (absl::GetFlag(FLAGS_tail) < 0) return UsageError("logs: --tail must be >= 0");
  GetLogsRequest req;
  req.set_job_id(args[2]);
  req.set_rank(rank >= 0 ? rank : 0);
  req.set_all_ranks(rank < 0);
  req.set_tail_lines(absl::GetFlag(FLAGS_tail));
  if (const std::string since = absl::GetFlag(FLAGS_since); !since.empty()) {
    absl::Duration ago;
    absl::Time at;
    std::string err;
    if (absl::ParseDuration(since, &ago)) {
      at = absl::Now() - ago;
    } else if (!absl::ParseTime(absl::RFC3339_full, since, &at, &err)) {
      return UsageError(absl::StrCat("logs: --since=", since,
                                     ": not a duration (10m) or an RFC 3339 time (", err, ")"));
    }
    req.set_since_unix_ms(absl::ToUnixMillis(at));
  }
  auto client = Connect();
  if (!client.ok()) return Fail(client.status());
  const bool follow = absl::GetFlag(FLAGS_follow);
  bool seen_finished = false;
  while (true) {
    auto resp = (*client)->GetLogs(req);
    if (!resp.ok()) return Fail(resp.status());
    for (const LogLine& l : resp->lines()) {
      std::cout << "attempt-" << l.attempt() << "/rank-" << l.rank() << "| " << l.text() << "\n";
    }
    std::cout << std::flush;
    req.set_after_seq(resp->next_seq());
    req.set_tail_lines(0);  // the tail applies to the first answer only
    if (resp->truncated()) continue;
    // After the job ended one more look: lines shipped while the last answer was built.
    if (!follow || seen_finished) return kOk;
    seen_finished = resp->job_finished();
    absl::SleepFor(absl::Milliseconds(seen_finished ? 200 : 500));
  }
}

// The job's training series (GetJobMetrics): one line per stored point.
int CmdMetrics(const std::vector<std::string>& args) {
  if (args.size() < 3) return UsageError("usage: shardctl metrics JOB [--json]");
  auto client = Connect();
  if (!client.ok()) return Fail(client.status());
  auto m = (*client)->GetJobMetrics(args[2]);
  if (!m.ok()) return Fail(m.status());
  if (absl::GetFlag(FLAGS_json)) {
    std::cout << ToJson(*m);
    return kOk;
  }
  std::cout << absl::StrFormat("%s: %s, %d logged steps in %d points (%d step(s) a point)\n",
                               args[2], JobStateName(m->state()), m->reported_steps(),
                               m->points_size(), m->stride());
  std::cout << absl::StrFormat("%-9s %-9s %-9s %-10s %-9s %-11s %-8s %-9s %s\n", "STEP", "LOSS",
                               "VAL_LOSS", "LR", "GRAD_NORM", "TOKENS/S", "MFU", "STEP_S",
                               "PEAK_MEM");
  for (const MetricsPoint& p : m->points()) {
    std::cout << absl::StrFormat(
        "%-9d %-9.4f %-9s %-10.3g %-9.3f %-11.0f %-8s %-9.3f %.0fMiB\n", p.step(), p.loss(),
        p.val_count() > 0 ? absl::StrFormat("%.4f", p.val_loss()) : "-", p.lr(), p.grad_norm(),
        p.tokens_per_s(), absl::StrFormat("%.2f%%", 100 * p.mfu()), p.step_time_s(),
        p.peak_memory_bytes() / 1048576.0);
  }
  if (m->points_size() == 0) std::cout << "(no progress reported yet)\n";
  return kOk;
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
  if (cmd == "metrics") return CmdMetrics(args);
  if (cmd == "cancel") return CmdCancel(args);
  if (cmd == "checkpoints") return CmdCheckpoints(args);
  if (cmd == "workers") return CmdWorkers();
  if (cmd == "whoami") return CmdWhoAmI();
  if (cmd == "export") return CmdExport(args);
  std::cerr << "shardctl: unknown command \"" << cmd << "\"\n\n" << kUsageText;
  return kUsage;
}
