// Reports a trainer's checkpoint files to the coordinator (CoordinatorClient::ReportCheckpoint),
// so that it lists a checkpoint only once every shard writer reported and the manifest is
// committed. Torch-free (the coordinator's protos and LibTorch's bundled protobuf headers do not
// mix in one translation unit).
//
// Thread safety: the returned callback may be called from any thread (the save thread), one call
// at a time per checkpoint::Checkpointer.
#ifndef SHARDLINE_TRAINER_COORDINATOR_REPORTER_H_
#define SHARDLINE_TRAINER_COORDINATOR_REPORTER_H_

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "checkpoint/format.h"

namespace shardline::trainer {

struct CoordinatorReporterOptions {
  std::string address;  // host:port ($SHARDLINE_COORDINATOR).
  std::string token;    // the attempt credential ($SHARDLINE_RDZV_SECRET)
  std::string job_id;
  int attempt = 0;
  int rank = 0;
};

// A checkpoint::SaveEvent callback (checkpoint::Checkpointer::Options::on_saved) sending one
// CheckpointReport per event: writers report their data file; rank 0 reports MANIFEST.json with
// manifest_committed = true and expected_files. A failed report is logged, never fails the save
// (the files are on disk; the coordinator's listing is an index of them). Errors: the client's
// creation errors.
absl::StatusOr<std::function<void(const checkpoint::SaveEvent&)>> MakeCoordinatorReporter(
    const CoordinatorReporterOptions& options);

}  // namespace shardline::trainer

#endif  // SHARDLINE_TRAINER_COORDINATOR_REPORTER_H_
