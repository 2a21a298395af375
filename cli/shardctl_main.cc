// shardctl: the Shardline command-line client. This file holds the flags, parses them into a
// ShardctlOptions (cli/options.h) and dispatches on the command; the commands are in
// cli/commands.h, where the coordinator and token come from in cli/target.h, the exit codes in
// cli/exit_codes.h.
//
//   shardctl cluster up [--state_dir=.cluster] [--workers=2] [--slots=2]
//   shardctl cluster down [--state_dir=.cluster]
//   shardctl submit SPEC [--set path=value ...] [--watch] [--dry_run] [--continue_job=JOB]
//   shardctl status JOB | list | workers | checkpoints JOB | whoami   (each takes --json)
//   shardctl watch JOB [--json]
//   shardctl logs JOB [--rank=N|--all] [--follow] [--tail=K] [--since=10m|RFC3339]
//   shardctl metrics JOB [--json]
//   shardctl cancel JOB
//   shardctl export JOB --out=FILE.safetensors [--step=N]
//   shardctl export JOB --format=hf --out=DIR [--step=N]   (a transformers folder: hf/export.h)
//   shardctl export JOB --format=dcp --out=DIR [--with_optimizer] [--step=N]   (PyTorch DCP)
//
// Without TLS a token is never sent to a non-loopback coordinator unless --insecure (or
// insecure=true in the config file).
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/strip.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/options.h"
#include "cli/session.h"

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
ABSL_FLAG(int64_t, step, -1,
          "export, submit --continue_job: checkpoint step (default: the latest committed).");
ABSL_FLAG(std::string, continue_job, "",
          "submit: continue this job's committed checkpoint (--step, or its newest) in the new "
          "job: sets checkpoint.resume_from to its path.");
ABSL_FLAG(std::string, out, "",
          "export: output .safetensors file (--format=hf and dcp: a folder).");
ABSL_FLAG(std::string, format, "safetensors",
          "export: safetensors (Shardline's names, one file), hf (a Hugging Face transformers "
          "folder: config.json + model.safetensors, GPT and Llama-family models) or dcp (a "
          "PyTorch torch.distributed.checkpoint folder: checkpoint/dcp_export.h).");
ABSL_FLAG(bool, with_optimizer, false,
          "export --format=dcp: the optimizer state too (get_optimizer_state_dict's layout).");
ABSL_FLAG(int, timeout_s, 10, "Deadline of each call to the coordinator, seconds.");
ABSL_FLAG(bool, check_flags, false, "Parse the flags and exit (used by deploy tests).");

namespace shardline::cli {
namespace {

constexpr char kUsageText[] = R"(shardctl: submit, watch and inspect Shardline FSDP training jobs.

Commands:
  cluster up | down              start/stop a local coordinator + workers (--state_dir, --workers, --slots)
  submit SPEC [--set k=v]...     validate SPEC locally, submit it, print the job id (--watch to follow;
                                 --dry_run: print the resolved spec as YAML, or JSON with --json, and stop;
                                 relative paths, in SPEC or in --set, are taken against SPEC's folder;
                                 --continue_job=OLD [--step=N]: carry on OLD's checkpoint, resharded)
  status JOB                     state, progress, placement, events, sample
  list                           all jobs, one line each
  watch JOB                      live progress until the job ends (--json: one JSON object per update)
  logs JOB [--rank=N|--all]      rank logs from the coordinator (--follow, --tail=K, --since=10m)
  metrics JOB                    the job's training series: loss, val loss, lr, grad norm, tokens/s...
  cancel JOB                     stop every rank of the job
  checkpoints JOB                committed checkpoints of the job
  export JOB --out=F [--step=N]  the model of a committed checkpoint as one .safetensors file
                                 (--format=hf --out=DIR: a folder transformers loads;
                                 --format=dcp --out=DIR [--with_optimizer]: a folder
                                 torch.distributed.checkpoint.load reads)
  workers                        registered workers and their slots
  whoami                         the user (and admin or not) the coordinator takes the token for
  help                           this text (--help: with every flag)
Read commands take --json. Coordinator: --coordinator, $SHARDLINE_COORDINATOR, the config file,
or the local cluster; token: --token_file, --token, $SHARDLINE_TOKEN, the config file, or the
local cluster. TLS: --tls_ca=CA.pem [--tls_cert, --tls_key], or tls_ca= etc. in the config file;
a token goes to a non-loopback coordinator only over TLS, or with --insecure.

Exit codes: 0 ok (watched job SUCCEEDED); 1 watched job FAILED or CANCELLED; 2 usage; 3 invalid
spec; 4 coordinator unreachable; 5 not found; 6 unauthenticated or permission denied; 7 other.
)";

// The flags, after absl parsed them, with the --set values taken out before (`sets`).
ShardctlOptions OptionsFromFlags(std::vector<std::string> sets) {
  ShardctlOptions o;
  ConnectionOptions& c = o.connection;
  c.coordinator = absl::GetFlag(FLAGS_coordinator);
  c.token = absl::GetFlag(FLAGS_token);
  c.token_file = absl::GetFlag(FLAGS_token_file);
  c.tls = {absl::GetFlag(FLAGS_tls_ca), absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key),
           absl::GetFlag(FLAGS_insecure)};
  c.config = absl::GetFlag(FLAGS_config);
  c.state_dir = absl::GetFlag(FLAGS_state_dir);
  c.timeout = absl::Seconds(absl::GetFlag(FLAGS_timeout_s));
  o.json = absl::GetFlag(FLAGS_json);
  o.workers = absl::GetFlag(FLAGS_workers);
  o.slots = absl::GetFlag(FLAGS_slots);
  o.sets = std::move(sets);
  o.watch = absl::GetFlag(FLAGS_watch);
  o.dry_run = absl::GetFlag(FLAGS_dry_run);
  o.rank = absl::GetFlag(FLAGS_rank);
  o.all = absl::GetFlag(FLAGS_all);
  o.follow = absl::GetFlag(FLAGS_follow);
  o.tail = absl::GetFlag(FLAGS_tail);
  o.since = absl::GetFlag(FLAGS_since);
  o.step = absl::GetFlag(FLAGS_step);
  o.continue_job = absl::GetFlag(FLAGS_continue_job);
  o.out = absl::GetFlag(FLAGS_out);
  o.format = absl::GetFlag(FLAGS_format);
  o.with_optimizer = absl::GetFlag(FLAGS_with_optimizer);
  return o;
}

struct Command {
  const char* name;
  int (*run)(Session&, const Args&);
};

constexpr Command kCommands[] = {
    {"cluster", CmdCluster}, {"submit", CmdSubmit}, {"status", CmdStatus},
    {"list", CmdList},       {"watch", CmdWatch},   {"logs", CmdLogs},
    {"metrics", CmdMetrics}, {"cancel", CmdCancel}, {"checkpoints", CmdCheckpoints},
    {"workers", CmdWorkers}, {"whoami", CmdWhoAmI}, {"export", CmdExport},
};

}  // namespace
}  // namespace shardline::cli

int main(int argc, char** argv) {
  using namespace shardline::cli;
  // absl's --help puts "shardctl: " in front itself.
  absl::SetProgramUsageMessage(absl::StripPrefix(kUsageText, "shardctl: "));
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
  if (cmd == "help") {
    std::cout << kUsageText;
    return kOk;
  }
  for (const Command& c : kCommands) {
    if (cmd == c.name) {
      Session session(OptionsFromFlags(std::move(sets)));
      return c.run(session, args);
    }
  }
  std::cerr << "shardctl: unknown command \"" << cmd << "\"\n\n" << kUsageText;
  return kUsage;
}
