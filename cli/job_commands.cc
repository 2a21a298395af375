// shardctl submit, status, list, cancel: a job's life seen from the command line.
#include <iostream>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/json_output.h"
#include "cli/progress_view.h"
#include "spec/job_spec.h"

namespace shardline::cli {

int CmdSubmit(Session& session, const Args& args) {
  if (args.size() < 3) return session.UsageError("usage: shardctl submit SPEC [--set k=v]");
  const ShardctlOptions& opts = session.options();
  spec::LoadOptions lo;
  lo.overrides = opts.sets;
  std::optional<CheckpointInfo> continued;
  if (!opts.continue_job.empty()) {
    // The old job's checkpoint becomes checkpoint.resume_from (the trainer loads it, resharded),
    // checked with the rest of the spec below.
    for (const std::string& set : opts.sets) {
      if (absl::StartsWith(set, "checkpoint.resume_from=")) {
        return session.UsageError(
            "submit: --continue_job and --set checkpoint.resume_from name two checkpoints");
      }
    }
    auto client = session.Connect();
    if (!client.ok()) return session.Fail(client.status());
    auto found = CommittedCheckpoint(**client, opts.continue_job, opts.step);
    if (!found.ok()) return session.Fail(found.status());
    continued = *found;
    lo.overrides.push_back(absl::StrCat("checkpoint.resume_from=", found->path()));
  }
  // Local validation first: a bad spec never reaches the cluster. Paths become absolute.
  auto job_spec = spec::LoadJobSpecFile(args[2], lo);
  if (!job_spec.ok()) return session.Fail(job_spec.status());
  if (continued.has_value() && continued->step() >= job_spec->train().steps()) {
    return session.Fail(absl::InvalidArgumentError(
        absl::StrCat("--continue_job ", opts.continue_job, ": its checkpoint is step ",
                     continued->step(), ", not below train.steps ", job_spec->train().steps(),
                     "; nothing is left to train (raise train.steps)")));
  }
  if (opts.dry_run) {
    std::cout << (opts.json ? spec::JobSpecToJson(*job_spec) : spec::JobSpecToYaml(*job_spec));
    return kOk;
  }
  auto client = session.Connect();
  if (!client.ok()) return session.Fail(client.status());
  auto job_id = (*client)->SubmitJob(*job_spec);
  if (!job_id.ok()) return session.Fail(job_id.status());
  std::cout << *job_id << "\n" << std::flush;
  if (opts.watch) return WatchJob(session, **client, *job_id);
  return kOk;
}

int CmdStatus(Session& session, const Args& args) {
  if (args.size() < 3) return session.UsageError("usage: shardctl status JOB");
  auto client = session.Connect();
  if (!client.ok()) return session.Fail(client.status());
  auto st = (*client)->GetJob(args[2]);
  if (!st.ok()) return session.Fail(st.status());
  std::cout << (session.options().json ? ToJson(*st) : StatusBlock(*st));
  return kOk;
}

int CmdList(Session& session, const Args&) {
  auto client = session.Connect();
  if (!client.ok()) return session.Fail(client.status());
  auto jobs = (*client)->ListJobs();
  if (!jobs.ok()) return session.Fail(jobs.status());
  if (session.options().json) {
    ListJobsResponse r;
    for (const JobStatus& j : *jobs) *r.add_jobs() = j;
    std::cout << ToJson(r);
    return kOk;
  }
  std::cout << JobListTable(*jobs);
  return kOk;
}

int CmdCancel(Session& session, const Args& args) {
  if (args.size() < 3) return session.UsageError("usage: shardctl cancel JOB");
  auto client = session.Connect();
  if (!client.ok()) return session.Fail(client.status());
  const absl::Status s = (*client)->CancelJob(args[2], "cancelled by shardctl");
  if (!s.ok()) return session.Fail(s);
  std::cout << "cancelled " << args[2] << "\n";
  return kOk;
}

}  // namespace shardline::cli
