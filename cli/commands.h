// shardctl's commands, one function each, dispatched by shardctl_main.cc on args[1]. `args` is
// the whole positional command line (args[0] the program, args[1] the command, args[2] its
// operand); the flags are in session.options(). Each prints its result on stdout, its errors
// through session.Fail or session.UsageError, and returns the exit code (exit_codes.h).
//
//   cluster_commands.cc     cluster up|down, workers, whoami
//   job_commands.cc         submit, status, list, cancel
//   watch_command.cc        watch (and submit --watch)
//   log_commands.cc         logs, metrics
//   checkpoint_commands.cc  checkpoints, export
//
// Thread safety: one command per shardctl invocation.
#ifndef SHARDLINE_CLI_COMMANDS_H_
#define SHARDLINE_CLI_COMMANDS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cli/session.h"
#include "client/client.h"

namespace shardline::cli {

using Args = std::vector<std::string>;

int CmdCluster(Session& session, const Args& args);
int CmdWorkers(Session& session, const Args& args);
int CmdWhoAmI(Session& session, const Args& args);

int CmdSubmit(Session& session, const Args& args);
int CmdStatus(Session& session, const Args& args);
int CmdList(Session& session, const Args& args);
int CmdCancel(Session& session, const Args& args);

int CmdWatch(Session& session, const Args& args);
// Follows `job_id` until it ends: kOk when it SUCCEEDED, kJobFailed otherwise. On a terminal one
// line redrawn in place, otherwise a line per change of step or state; --json: one JSON object
// per update.
int WatchJob(Session& session, client::CoordinatorClient& client, const std::string& job_id);

int CmdLogs(Session& session, const Args& args);
int CmdMetrics(Session& session, const Args& args);

int CmdCheckpoints(Session& session, const Args& args);
// The committed checkpoint of `job_id` at `step`, or its newest with step -1. NOT_FOUND naming the
// job (and step) when there is none.
absl::StatusOr<CheckpointInfo> CommittedCheckpoint(client::CoordinatorClient& client,
                                                   const std::string& job_id, int64_t step);
int CmdExport(Session& session, const Args& args);

}  // namespace shardline::cli

#endif  // SHARDLINE_CLI_COMMANDS_H_
