// Exit codes of `trainer` (trainer/trainer_main.cc): part of the launch contract, so whoever
// starts a trainer reads them without depending on it. The worker daemon reports them to the
// coordinator (which does not restart a job after kExitCheckpointDirNotShared); a person reads
// the matching message on stderr. Header only, torch-free and proto-free.
//
//   0    training finished
//   1    internal error (a bug or an unexpected LibTorch failure)
//   2    bad job spec, command line or environment (the message names the field and value)
//   3    data error: the data file is missing, unreadable, malformed, holds ids outside the
//        vocabulary, or is too small for one global batch
//   4    communication failure: rendezvous or a collective failed, timed out, or lost a peer
//        (the message names the group, operation and step)
//   5    training diverged: the loss became NaN or infinite (the message names the step)
//   6    checkpoint.dir is not shared: some rank cannot see the probe rank 0 wrote there at the
//        start (trainer/checkpoint_dir_probe.h; the message names the directory, the rank and
//        both hosts). The coordinator fails the job without restarting it: a new attempt would
//        see the same mounts
//   7    left the job: fault_tolerance REPLICA_GROUPS and this rank's replica group was lost (the
//        coordinator answered its step vote LEAVE; trainer/replica_fault_tolerance.h). Expected:
//        the coordinator treats any exit of a rank of a lost group as part of the loss
//   128+N  stopped by signal N between steps (143 for SIGTERM, 130 for SIGINT); a SIGKILL
//        shows as the signal itself to the parent
#ifndef SHARDLINE_LAUNCH_EXIT_CODES_H_
#define SHARDLINE_LAUNCH_EXIT_CODES_H_

namespace shardline::launch {

enum TrainerExitCode : int {
  kExitOk = 0,
  kExitInternal = 1,
  kExitBadSpec = 2,
  kExitDataError = 3,
  kExitCommFailure = 4,
  kExitDiverged = 5,
  kExitCheckpointDirNotShared = 6,
  kExitLeftReplicaGroup = 7,
  kExitSignalBase = 128,
};

}  // namespace shardline::launch

#endif  // SHARDLINE_LAUNCH_EXIT_CODES_H_
