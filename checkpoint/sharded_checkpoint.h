// Checkpointer: saves and loads an FSDP engine's sharded parameters and optimizer state in the
// checkpoint format of format.h (docs/checkpoint_format.md), with the training progress (step,
// data cursor, RNG state, optimizer step count).
//
//   ASSIGN_OR_RETURN(auto ckpt, Checkpointer::Create(options, engine, optimizer, world));
//   ASSIGN_OR_RETURN(TrainingProgress p, ckpt->Load(/*step=*/-1));   // any W, S, strategy
//   ... train ...
//   RETURN_IF_ERROR(ckpt->Save(progress, /*async=*/true));            // every rank, same step
//   RETURN_IF_ERROR(ckpt->WaitForPendingSave());                      // before exiting
//
// Save (a collective over `world`: every rank calls it at the same step):
//   rank 0 picks a random save id and broadcasts it; the ranks of replicate index 0 (one per
//   shard) write their shard's slices (shard_writer.h); rank 0 then waits for every shard's
//   index and writes MANIFEST.json atomically. Then, with Options.report_commit set (under the
//   coordinator), rank 0 hands the commit to a CommitReporter (commit_reporter.h): the report is
//   retried until the coordinator acknowledges it, and only then is retention applied, on that
//   reporter's thread, so no save waits for the coordinator; without it, rank 0 applies
//   retention at once. Synchronous saves end with a barrier, so every rank returns after the
//   commit. Asynchronous saves copy the slices to host memory on the calling thread and do the
//   rest on a background thread; the next Save (or WaitForPendingSave) waits for it first and
//   returns its error. WaitForCommitReports waits for the reports (end of training).
// Load (a collective over `world`): every rank checks the manifest (version, model fingerprint,
// optimizer kind), that every file exists with its size, and reads and checksums the ranges
// overlapping its own shard of every parameter and state tensor (read through a mapping of the
// data files, CheckpointReader::MapElements, not copied); the ranks
// then agree (all-reduce) that all succeeded before any of them copies into the model, so a
// damaged checkpoint loads nothing anywhere. Resharding is offset arithmetic: each rank reads
// exactly the elements its new shards cover, whatever W, S and strategy wrote them.
//
// Errors: Load: NOT_FOUND (no committed checkpoint / missing file), FAILED_PRECONDITION (unknown
// format version, another model: names the manifest and the first differing tensor, another
// optimizer, another job when Options.job_id is set), DATA_LOSS (checksum mismatch, truncated file,
// also one truncated after it was mapped: names file and tensor), ABORTED on the ranks whose own
// reads succeeded when another rank's failed. Save: INTERNAL for I/O, FAILED_PRECONDITION (rank 0;
// ABORTED on the others) for a root holding another job's checkpoint, DEADLINE_EXCEEDED when shard
// writers do not finish within commit_timeout; collective errors. A save that runs out of space
// (ENOSPC) fails with INTERNAL naming the file being written; nothing of it is committed, and
// the committed checkpoints are untouched.
//
// Thread safety: call from the training thread only; callbacks may run on the save thread.
#ifndef SHARDLINE_CHECKPOINT_SHARDED_CHECKPOINT_H_
#define SHARDLINE_CHECKPOINT_SHARDED_CHECKPOINT_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "checkpoint/commit_reporter.h"
#include "checkpoint/format.h"
#include "common/retry.h"
#include "fsdp/communicator.h"
#include "fsdp/fsdp_engine.h"
#include "fsdp/sharded_optimizer.h"

namespace shardline::checkpoint {

// Where training stands; saved with the tensors, returned by Load.
struct TrainingProgress {
  int64_t step = 0;        // Optimizer steps completed.
  int64_t data_epoch = 0;  // data::DataCursor of the next global batch.
  int64_t data_position = 0;
  std::string rng_state;       // Filled by Save from LibTorch's CPU generator when empty.
  int64_t optimizer_step = 0;  // Filled by Load from the manifest.
  // The data cursor is not known (a checkpoint written by PyTorch): the training loop places it
  // where its sampler is after `step` steps (data::DistributedSampler::CursorAfterSteps).
  bool cursor_from_step = false;
};

class Checkpointer {
 public:
  struct Options {
    std::string root;            // Checkpoints go to <root>/step_<N>/.
    int keep_last = 0;           // Retention after each commit (0 keeps all).
    std::string optimizer_kind;  // "adamw" / "sgd" (recorded, checked on load).
    // The job this run belongs to, recorded in every manifest. When set, Load refuses a
    // checkpoint of another job and Save refuses a root holding one (FAILED_PRECONDITION naming
    // both jobs): a job never resumes, overwrites or deletes another job's checkpoint.
    std::string job_id;
    int32_t attempt = 0;  // Recorded in every manifest with job_id (not checked).
    absl::Duration commit_timeout = absl::Minutes(10);
    // Threads reading and checksumming ranges on load (I/O and CRC overlap).
    int load_threads = 4;
    // After this rank's data file is durable (writers), and after the commit (rank 0) when
    // report_commit is not set; may run on the save thread. Best effort.
    std::function<void(const SaveEvent&)> on_saved;
    // Rank 0: one attempt at reporting a commit (the event lists MANIFEST.json and every data
    // file of the step, so it alone commits the step in the coordinator's registry); OK once
    // acknowledged. When set, retention waits for the acknowledgement (commit_reporter.h).
    std::function<absl::Status(const SaveEvent&)> report_commit;
    // Retries of report_commit; total bounds each commit's report (then the save's retention is
    // skipped). 5 minutes: longer than a coordinator restart and its workers' reconnection,
    // short enough that the end of training does not hang long on a coordinator that is gone.
    BackoffPolicy report_backoff;
    // Tests only: runs on writers after the data file is written, before its index (simulates
    // a crash in the middle of a save).
    std::function<void(int shard_index)> test_after_data_file;
  };

  // engine and world are borrowed and must outlive the Checkpointer; optimizer may be nullptr
  // (parameters only). world spans all W ranks (rank 0 is global rank 0).
  // Errors: INVALID_ARGUMENT for an empty root or a null engine/world.
  static absl::StatusOr<std::unique_ptr<Checkpointer>> Create(const Options& options,
                                                              fsdp::FsdpEngine* engine,
                                                              fsdp::ShardedOptimizer* optimizer,
                                                              fsdp::Communicator* world);
  // Waits for a pending save's writes; a commit still waiting for other writers is abandoned
  // (the step stays uncommitted). Call WaitForPendingSave first to finish it.
  ~Checkpointer();

  absl::Status Save(const TrainingProgress& progress, bool async);
  absl::Status WaitForPendingSave();
  // Rank 0 with report_commit: waits until every commit was acknowledged and its retention ran,
  // or its report was given up (CommitReporter::WaitIdle: returns a retention error). OK
  // elsewhere. Call after WaitForPendingSave.
  absl::Status WaitForCommitReports();
  // step -1: the latest committed one. Restores parameters, optimizer state and step count and
  // the RNG state; returns the progress to continue from.
  absl::StatusOr<TrainingProgress> Load(int64_t step);

  // Replica-group fault tolerance: later saves run over `world` (borrowed; the live replica
  // groups' ranks) and are written by the ranks of replica group `writer_group` (one per shard)
  // and committed by that group's first rank, instead of group 0 and global rank 0. Between
  // saves only (waits for a pending one first; its error is returned).
  absl::Status SetMembership(fsdp::Communicator* world, int writer_group);

  // The fingerprint this model's checkpoints carry (format.h ModelFingerprint).
  std::string fingerprint() const { return fingerprint_; }

 private:
  Checkpointer(const Options& options, fsdp::FsdpEngine* engine, fsdp::ShardedOptimizer* optimizer,
               fsdp::Communicator* world);
  struct Slices;
  // This rank's slices: parameters, then optimizer state ("<param>#<state>").
  std::vector<fsdp::ShardSlice> LocalSlices() const;
  absl::Status WriteAndCommit(const Slices& slices);
  // Rank 0 before its first save: every committed manifest under root is this job's.
  absl::Status CheckRootOwner() const;
  // The steps of Save, in order. The committer checks the root's owner (once) and un-commits
  // `step` if it is committed; then every rank agrees on the committer's save id (ABORTED when
  // the committer refused the save; the committer returns its own error).
  absl::Status UncommitForSave(int64_t step);
  absl::StatusOr<uint64_t> AgreeSaveId(int64_t step, bool committer);
  // What this rank writes for `progress`: its role, its shard and the checkpoint's metadata.
  std::shared_ptr<Slices> NewSlices(const TrainingProgress& progress, uint64_t save_id,
                                    bool committer) const;
  // A writer's host copies of its slices (private copies for an asynchronous save).
  absl::Status CopyShardsToHost(bool async, Slices* sl) const;
  // A synchronous save's end: every rank learns whether any rank failed (`own` is this rank's).
  absl::Status AgreeSaveResult(const Slices& sl, const absl::Status& own);

  Options options_;
  fsdp::FsdpEngine* engine_;
  fsdp::ShardedOptimizer* optimizer_;
  fsdp::Communicator* world_;
  std::string fingerprint_;
  std::map<std::string, std::string> aliases_;
  bool root_checked_ = false;  // CheckRootOwner passed (rank 0)
  int writer_group_ = 0;       // SetMembership: the replica group that writes and commits.

  // Rank 0 with report_commit: reports commits and applies retention after each is
  // acknowledged. Created before the first commit.
  std::unique_ptr<CommitReporter> commit_reporter_;
  std::thread save_thread_;
  // Set by the destructor: a pending commit stops waiting for writers (a failed run must not
  // hang in its exit path until commit_timeout).
  std::atomic<bool> cancel_{false};
  absl::Mutex mu_;
  absl::Status save_status_ ABSL_GUARDED_BY(mu_);
};

// Loads parameters from a safetensors file (checkpoint.init_from_safetensors: start from given
// weights; the optimizer stays fresh). Names are the model's parameter names (aliases of tied
// parameters accepted); F32, F16 and BF16 are converted to fp32. Each rank keeps its shard; no
// collective. The header is checked (SafetensorsReader) and every parameter looked up before
// any tensor is read; then only this rank's range of each parameter is read (pread), one range
// at a time, into its shard: a rank never holds a whole tensor (sharded initialization,
// docs/fsdp_step.md). Errors:
// SafetensorsReader's (NOT_FOUND, DATA_LOSS naming the file and the tensor or field);
// INVALID_ARGUMENT naming a missing parameter or a shape mismatch (nothing is loaded then).
absl::Status LoadSafetensorsIntoEngine(const std::string& path, fsdp::FsdpEngine* engine);

}  // namespace shardline::checkpoint

#endif  // SHARDLINE_CHECKPOINT_SHARDED_CHECKPOINT_H_
