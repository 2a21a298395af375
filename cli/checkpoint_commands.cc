// shardctl checkpoints, export: a job's committed checkpoints and their model as files others
// load (one .safetensors file, or a transformers folder).
#include <filesystem>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "checkpoint/dcp_export.h"
#include "checkpoint/safetensors.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/json_output.h"
#include "hf/export.h"
#include "spec/hf_config.h"

namespace shardline::cli {

namespace fs = std::filesystem;

absl::StatusOr<CheckpointInfo> CommittedCheckpoint(client::CoordinatorClient& client,
                                                   const std::string& job_id, int64_t step) {
  auto cps = client.ListCheckpoints(job_id);
  if (!cps.ok()) return cps.status();
  const CheckpointInfo* chosen = nullptr;
  for (const CheckpointInfo& c : *cps) {
    if (!c.committed()) continue;
    if (step >= 0 ? c.step() == step : (chosen == nullptr || c.step() > chosen->step())) {
      chosen = &c;
    }
  }
  if (chosen == nullptr) {
    return absl::NotFoundError(
        step >= 0 ? absl::StrCat("job ", job_id, " has no committed checkpoint at step ", step)
                  : absl::StrCat("job ", job_id, " has no committed checkpoint"));
  }
  return *chosen;
}

int CmdCheckpoints(Session& session, const Args& args) {
  if (args.size() < 3) return session.UsageError("usage: shardctl checkpoints JOB");
  auto client = session.Connect();
  if (!client.ok()) return session.Fail(client.status());
  auto cps = (*client)->ListCheckpoints(args[2]);
  if (!cps.ok()) return session.Fail(cps.status());
  if (session.options().json) {
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
int CmdExport(Session& session, const Args& args) {
  const ShardctlOptions& opts = session.options();
  if (args.size() < 3 || opts.out.empty()) {
    return session.UsageError(
        "usage: shardctl export JOB --out=FILE.safetensors [--step=N] "
        "[--format=safetensors|hf|dcp] [--with_optimizer]");
  }
  const std::string& format = opts.format;
  if (format != "safetensors" && format != "hf" && format != "dcp") {
    return session.UsageError(
        absl::StrCat("export: --format=", format, " is not safetensors, hf or dcp"));
  }
  if (opts.with_optimizer && format != "dcp") {
    return session.UsageError("export: --with_optimizer is only for --format=dcp");
  }
  auto client = session.Connect();
  if (!client.ok()) return session.Fail(client.status());
  auto found = CommittedCheckpoint(**client, args[2], opts.step);
  if (!found.ok()) return session.Fail(found.status());
  const CheckpointInfo* chosen = &*found;
  const std::string root = fs::path(chosen->path()).parent_path().string();
  absl::Status s;
  if (format == "hf") {
    // The checkpoint does not record head counts or rope theta: the job's spec gives them (a
    // model.hf_dir is read here, so it must be visible on this machine like the checkpoint).
    auto job = (*client)->GetJob(args[2]);
    if (!job.ok()) return session.Fail(job.status());
    ModelSpec model = job->spec().model();
    s = spec::ResolveHfModel(&model);
    if (s.ok()) s = hf::ExportHfFromStepDir(chosen->path(), model, opts.out);
  } else if (format == "dcp") {
    s = checkpoint::ExportDcpFromStepDir(chosen->path(), opts.out, opts.with_optimizer);
  } else {
    s = checkpoint::ExportSafetensors(root, chosen->step(), opts.out);
  }
  if (!s.ok()) return session.Fail(s);
  std::cout << "wrote " << opts.out << " (step " << chosen->step() << " of " << args[2] << ")\n";
  return kOk;
}

}  // namespace shardline::cli
