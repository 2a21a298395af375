// The names of the environment variables of the launch contract (launch/rank_env.h): what the
// worker daemon, torchrun or a shell puts in a trainer rank's environment. The one place they
// are spelled; RankEnv's writer and reader, the daemon and the trainer use these constants.
//
// Not here, on purpose:
//   SHARDLINE_TLS_CA, SHARDLINE_INSECURE   the coordinator client's TLS settings, which the daemon
//       also hands each trainer: written and read by client/client_tls.h (ClientTlsEnv,
//       ClientOptionsFromEnv), the one home of the client's TLS, where the trainer's client is
//       made.
//   SHARDLINE_LOG_LEVEL                    common/logging's own, read by every binary.
//   SHARDLINE_TEST_*                       test-only hooks of the trainer, read where they act
//       (trainer/checkpointing.h, trainer/trainer_main.cc): set on a worker daemon by a test and
//       inherited by its trainers, never written by the daemon, not part of the contract.
//
// Thread safety: constants only.
#ifndef SHARDLINE_LAUNCH_ENV_NAMES_H_
#define SHARDLINE_LAUNCH_ENV_NAMES_H_

namespace shardline::launch {

// torchrun's names, with torchrun's meaning. The daemon sets all but MASTER_PORT (its trainers
// bootstrap through the coordinator's rendezvous instead of a TCP store).
inline constexpr char kRankEnv[] = "RANK";
inline constexpr char kWorldSizeEnv[] = "WORLD_SIZE";
inline constexpr char kLocalRankEnv[] = "LOCAL_RANK";
inline constexpr char kLocalWorldSizeEnv[] = "LOCAL_WORLD_SIZE";
inline constexpr char kMasterAddrEnv[] = "MASTER_ADDR";
inline constexpr char kMasterPortEnv[] = "MASTER_PORT";

// Set by the worker daemon only.
inline constexpr char kCoordinatorEnv[] = "SHARDLINE_COORDINATOR";
inline constexpr char kJobIdEnv[] = "SHARDLINE_JOB_ID";
inline constexpr char kAttemptEnv[] = "SHARDLINE_ATTEMPT";
inline constexpr char kRdzvNamespaceEnv[] = "SHARDLINE_RDZV_NAMESPACE";
inline constexpr char kRdzvSecretEnv[] = "SHARDLINE_RDZV_SECRET";
inline constexpr char kResumeStepEnv[] = "SHARDLINE_RESUME_STEP";
inline constexpr char kResumeFromJobEnv[] = "SHARDLINE_RESUME_FROM_JOB";
inline constexpr char kRankGenerationEnv[] = "SHARDLINE_RANK_GENERATION";
inline constexpr char kAdvertiseAddressEnv[] = "SHARDLINE_ADVERTISE_ADDRESS";
inline constexpr char kNodeNameEnv[] = "SHARDLINE_NODE_NAME";
inline constexpr char kOpenRootsEnv[] = "SHARDLINE_OPEN_ROOTS";
inline constexpr char kWriteRootsEnv[] = "SHARDLINE_WRITE_ROOTS";

// A CUDA job's device: set by the daemon per rank (worker/visible_devices.h), read by CUDA and
// NCCL themselves; the trainer reads CUDA_VISIBLE_DEVICES to pick its device.
inline constexpr char kCudaVisibleDevicesEnv[] = "CUDA_VISIBLE_DEVICES";
inline constexpr char kCudaDeviceOrderEnv[] = "CUDA_DEVICE_ORDER";
inline constexpr char kNcclSocketIfnameEnv[] = "NCCL_SOCKET_IFNAME";

// Set by a standalone launch (torchrun, a shell), never by the daemon: the TCP bootstrap store's
// secret (docs/security.md), and torchrun's flag for sharing its agent's store.
inline constexpr char kStoreSecretEnv[] = "SHARDLINE_STORE_SECRET";
inline constexpr char kStoreInsecureEnv[] = "SHARDLINE_STORE_INSECURE";
inline constexpr char kTorchElasticAgentStoreEnv[] = "TORCHELASTIC_USE_AGENT_STORE";

// An operator's settings for a trainer, never written by the daemon: set where the trainer is
// started, or on the daemon, whose environment its trainers inherit.
inline constexpr char kPeakFlopsEnv[] = "SHARDLINE_PEAK_FLOPS";
inline constexpr char kCpuMemoryCapMibEnv[] = "SHARDLINE_CPU_MEMORY_CAP_MIB";

// The daemon's own secrets: removed from every trainer's environment (the trainer's only token
// is its attempt's rendezvous secret).
inline constexpr char kJoinTokenEnv[] = "SHARDLINE_JOIN_TOKEN";
inline constexpr char kUserTokenEnv[] = "SHARDLINE_TOKEN";

}  // namespace shardline::launch

#endif  // SHARDLINE_LAUNCH_ENV_NAMES_H_
