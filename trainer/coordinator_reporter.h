// Reports a trainer's checkpoints to the coordinator (client::CoordinatorClient::ReportCheckpoint):
// the writers' data files (best effort), rank 0's commits (one attempt each; the Checkpointer's
// CommitReporter retries them until acknowledged and only then applies retention), and a
// resume that fell back from the coordinator's step to another committed one (an event on the
// job). Torch-free (the coordinator's protos and LibTorch's bundled protobuf headers do not mix
// in one translation unit).
//
// Thread safety: the callbacks may be called from any thread (the save thread, the commit
// reporter's thread), concurrently.
#ifndef SHARDLINE_TRAINER_COORDINATOR_REPORTER_H_
#define SHARDLINE_TRAINER_COORDINATOR_REPORTER_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "checkpoint/format.h"

namespace shardline::trainer {

struct CoordinatorReporterOptions {
  std::string address;  // host:port ($SHARDLINE_COORDINATOR).
  std::string token;    // the attempt credential ($SHARDLINE_RDZV_SECRET)
  std::string job_id;
  int attempt = 0;
  int rank = 0;
  // This rank's --metrics_out: rank 0 sends the steps logged there up to a commit before the
  // commit itself (logged_steps.h). Empty: none.
  std::string metrics_file;
  // Whether a step writes a line there (train_loop.h StepIsLogged): a commit of a logged step
  // waits (up to 10 s) for the training thread to write that step's line, which it does right
  // after the save that the commit ends.
  std::function<bool(int64_t step)> step_is_logged;
  // Whether checkpoint `step` was saved for a preemption (trainer/preemption.h): its commit
  // report says so (CheckpointReport.preempted). Unset: never.
  std::function<bool(int64_t step)> saved_for_preemption;
};

struct CoordinatorReporter {
  // checkpoint::Checkpointer::Options::on_saved: a writer's data file, one CheckpointReport,
  // queued and sent by a thread of its own (report_queue.h), so the save never waits on the
  // coordinator; a failure is logged, never fails the save (rank 0's commit report names every
  // data file).
  std::function<void(const checkpoint::SaveEvent&)> on_saved;
  // checkpoint::Checkpointer::Options::report_commit: rank 0's commit (MANIFEST.json and every
  // data file, manifest_committed, expected_files), one attempt, after the progress of every
  // step logged up to it (LoggedSteps) not sent with an earlier commit. OK: the coordinator
  // took the steps and stored the report, so its registry lists the step committed. Errors: the
  // first RPC's that failed (the steps are sent again with the next attempt).
  std::function<absl::Status(const checkpoint::SaveEvent&)> report_commit;
  // Rank 0: this attempt resumed from `step` because `missing_step`, the coordinator's resume
  // step, is not a committed checkpoint under `root` (CheckpointReport.fallback_from_step).
  // Retried with backoff for up to 30 s. Errors: the last RPC error.
  std::function<absl::Status(int64_t missing_step, int64_t step, const std::string& root)>
      report_fallback;
};

// The client's TLS comes from the environment (client/client_tls.h
// client::ClientOptionsFromEnv). Errors: the client's creation errors (a TLS file that cannot be
// read, a clear-text token off loopback).
absl::StatusOr<CoordinatorReporter> MakeCoordinatorReporter(
    const CoordinatorReporterOptions& options);

}  // namespace shardline::trainer

#endif  // SHARDLINE_TRAINER_COORDINATOR_REPORTER_H_
