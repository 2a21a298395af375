// trainer: one rank of a training job, started like a torchrun worker.
//
//   trainer --spec FILE [--set path=value ...] [--metrics_out FILE] [--backend fsdp|local]
//
// Environment: the launch contract, read once through launch::RankEnv (launch/rank_env.h;
// trainer/launch_env.h adds the standalone store's checks): RANK, WORLD_SIZE, LOCAL_RANK,
// MASTER_ADDR, MASTER_PORT as torchrun sets them; the worker daemon's SHARDLINE_* variables;
// SHARDLINE_PEAK_FLOPS (FLOP/s of one rank's device, for the MFU estimate; default 1e11 on
// CPU, 989e12 on CUDA, the dense bf16 peak of an H100/H200); SHARDLINE_RESUME_STEP (from the
// worker daemon: when > 0, resume from that checkpoint step instead of checkpoint.resume_step;
// when it is not committed on disk, from the newest committed one: TrainerCheckpointing::Restore).
// A malformed value of any of them exits 2 naming the variable and value.
// Exit codes: launch/exit_codes.h. The spec's paths are relative to the spec file. Logs go to
// stderr; the sample to stdout.
//
// fault_tolerance REPLICA_GROUPS (trainer/replica_fault_tolerance.h): every step is voted on
// with the coordinator (StepVote); SHARDLINE_RANK_GENERATION >= 1 marks a replacement rank,
// which resumes no checkpoint: it joins the running job and is healed from a live replica group.
// A rank whose group was lost exits 7 (kExitLeftReplicaGroup). SIGUSR1 is a preemption
// (trainer/preemption.h): save a checkpoint at the next step, then wait for the stop.
//
// The two test-only hooks below are read here with getenv, not through the launch contract: tests
// set them on a worker daemon (whose trainers inherit them) or on a trainer; the daemon never
// writes them.
// Tests only: SHARDLINE_TEST_PAUSE_IN_SAMPLE=RANK:SECONDS makes rank RANK sleep SECONDS when it
// reaches the final sample, before its first sampling forward, so that its peers wait for it
// inside their sampling collectives. It prints "test pause in sample: rank R" to stderr first,
// so a failure test can kill that rank while the others sample at a known point
// (trainer/multiprocess_test.sh). A malformed value exits 2, like a bad environment.
// Tests only: SHARDLINE_TEST_IGNORE_SIGTERM=1 makes the trainer ignore SIGTERM, so a STOP ends
// it only with the SIGKILL after the grace period: a rank that holds its slot (its device)
// through the whole grace (tests/integration/stop_grace_scenario_test.py).
//
// Main reads as the order of set-up: each step below is one function returning absl::Status or
// absl::StatusOr, and Main maps a failed step to its exit code (failure_exits.h). The checkpoint
// steps are in checkpoint_startup.h.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/DeviceAccelerator.h>
#include <ATen/Parallel.h>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/network_interface.h"
#include "common/open_beneath.h"
#include "common/status_macros.h"
#include "common/torch_status.h"
#include "common/write_beneath.h"
#include "data/token_dataset.h"
#include "data/vocab.h"
#include "fsdp/comm_groups.h"
#include "launch/exit_codes.h"
#include "launch/rank_env.h"
#include "models/model_factory.h"
#include "trainer/checkpoint_startup.h"
#include "trainer/checkpointing.h"
#include "trainer/config.h"
#include "trainer/coordinator_reporter.h"
#include "trainer/coordinator_step_voter.h"
#include "trainer/cpu_memory_cap.h"
#include "trainer/device_select.h"
#include "trainer/failure_exits.h"
#include "trainer/fsdp_backend.h"
#include "trainer/launch_env.h"
#include "trainer/local_backend.h"
#include "trainer/metrics.h"
#include "trainer/preemption.h"
#include "trainer/process_signals.h"
#include "trainer/replica_fault_tolerance.h"
#include "trainer/store.h"
#include "trainer/tensorboard_writer.h"
#include "trainer/train_loop.h"

namespace shardline::trainer {
namespace {

constexpr char kUsage[] =
    "usage: trainer --spec FILE [--set path=value ...] [--metrics_out FILE]\n"
    "               [--backend fsdp|local]\n"
    "  Runs one rank; RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT come from the\n"
    "  environment as torchrun sets them (all unset: one process). Under torchrun itself:\n"
    "    TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 torchrun --standalone --nproc_per_node=4 \\\n"
    "      --no-python trainer --spec job.yaml\n"
    "  (rank 0 serves the bootstrap store on MASTER_PORT, which torchrun's agent holds otherwise)\n"
    "  --set overrides any spec field, e.g. --set fsdp.hybrid_shard_degree=2 --set train.steps=50\n"
    "  --backend: fsdp (the FSDP engine at any W; the default, also called auto) or local (one\n"
    "             process, plain torch::optim: the reference the engine is tested against)\n";

constexpr char kTestPauseInSampleEnv[] = "SHARDLINE_TEST_PAUSE_IN_SAMPLE";

struct Args {
  std::string spec;
  std::vector<std::string> sets;
  std::string metrics_out;
  std::string backend = "auto";
};

// ---- the steps, in the order Main runs them ---------------------------------------------------

// Flags are parsed by hand so that --set values may contain commas and '=' (YAML flow maps).
// CANCELLED carries the usage text for --help.
absl::StatusOr<Args> ParseFlags(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") return absl::CancelledError(kUsage);
    std::string name = arg, value;
    bool has_value = false;
    if (absl::StartsWith(arg, "--") && arg.find('=') != std::string::npos) {
      name = arg.substr(0, arg.find('='));
      value = arg.substr(arg.find('=') + 1);
      has_value = true;
    }
    if (name != "--spec" && name != "--set" && name != "--metrics_out" && name != "--backend") {
      return absl::InvalidArgumentError(absl::StrCat("unknown argument \"", arg, "\"\n", kUsage));
    }
    if (!has_value) {
      if (i + 1 >= argc) {
        return absl::InvalidArgumentError(absl::StrCat(name, " needs a value\n", kUsage));
      }
      value = argv[++i];
    }
    if (name == "--spec") a.spec = value;
    if (name == "--set") a.sets.push_back(value);
    if (name == "--metrics_out") a.metrics_out = value;
    if (name == "--backend") a.backend = value;
  }
  if (a.spec.empty())
    return absl::InvalidArgumentError(absl::StrCat("--spec is required\n", kUsage));
  if (a.backend != "auto" && a.backend != "fsdp" && a.backend != "local") {
    return absl::InvalidArgumentError(
        absl::StrCat("--backend \"", a.backend, "\" is not one of auto, fsdp, local"));
  }
  return a;
}

// The launch environment (trainer/launch_env.h), and what it sets up for the whole process before
// anything else runs: the roots every input file is opened beneath (and every checkpoint file
// written beneath), the CPU memory cap, the
// log prefix.
absl::StatusOr<launch::RankEnv> SetUpEnvironment() {
  absl::StatusOr<launch::RankEnv> env = ReadLaunchEnv();
  if (!env.ok()) return env.status();
  SetOpenRoots(env->open_roots);
  SetWriteRoots(env->write_roots);
  if (env->cpu_memory_cap_mib.has_value()) {
    RETURN_IF_ERROR(
        InstallCpuMemoryCap(static_cast<int64_t>(*env->cpu_memory_cap_mib * 1048576.0)));
  }
  SetLogPrefix(absl::StrCat("rank ", env->rank));
  return env;
}

// The job spec with the --set overrides, resolved for this rank; rank 0 logs it.
absl::StatusOr<TrainerConfig> LoadConfig(const Args& args, const launch::RankEnv& env) {
  absl::StatusOr<TrainerConfig> c = LoadTrainerConfig(args.spec, args.sets, env);
  if (c.ok() && env.rank == 0) {
    SL_LOG(INFO) << "job " << c->job_name << ": " << c->layout.DebugString() << ", "
                 << c->accumulation_steps << " micro-batch(es) of " << c->micro_batch_size
                 << " per rank per step; resolved spec:\n"
                 << c->spec_yaml;
  }
  return c;
}

// The loop's options from the launch: rank, W, the MFU peak; and the test pause (header comment).
absl::StatusOr<TrainLoopOptions> LoopOptions(const TrainerConfig& c, const launch::RankEnv& env) {
  TrainLoopOptions loop;
  loop.rank = env.rank;
  loop.world_size = env.world_size;
  loop.should_stop = [] { return StopSignal() != 0; };
  loop.peak_flops_per_rank = env.peak_flops.value_or(c.cuda ? 989e12 : 1e11);
  if (const char* pause = std::getenv(kTestPauseInSampleEnv); pause != nullptr && *pause != '\0') {
    const std::vector<std::string> parts = absl::StrSplit(pause, ':');
    int rank = 0, seconds = 0;
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &rank) ||
        !absl::SimpleAtoi(parts[1], &seconds) || seconds < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(kTestPauseInSampleEnv, "=", pause, ": expected RANK:SECONDS (tests only)"));
    }
    if (rank == env.rank) {
      loop.before_sample = [rank, seconds] {
        std::fprintf(stderr, "test pause in sample: rank %d for %ds (%s)\n", rank, seconds,
                     kTestPauseInSampleEnv);
        std::fflush(stderr);
        absl::SleepFor(absl::Seconds(seconds));
      };
    }
  }
  return loop;
}

// Process-wide settings: stop and preemption signals, CPU threads, deterministic kernels, TF32.
void ConfigureProcess(const TrainerConfig& c) {
  InstallStopSignals();
  InstallPreemptionHandler();  // SIGUSR1, blocked by the worker daemon until now
  if (c.cpu_threads > 0) at::set_num_threads(c.cpu_threads);
  if (c.deterministic) {
    // cuBLAS is deterministic only with a fixed workspace (must be set before CUDA starts); on
    // CUDA, ops without a deterministic kernel warn instead of failing the job.
    if (c.cuda) setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
    at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/c.cuda);
  }
  if (c.cuda && c.allow_tf32) {
    // device.allow_tf32 (opt-in): float32 matmuls and convolutions on the TF32 tensor-core path.
    at::globalContext().setAllowTF32CuBLAS(true);
    at::globalContext().setAllowTF32CuDNN(true);
  }
}

absl::StatusOr<at::Device> SelectDevice(const TrainerConfig& c, const launch::RankEnv& env) {
  if (!c.cuda) return at::Device(at::kCPU);
  if (!at::hasCUDA()) {
    return absl::InvalidArgumentError(
        "device.kind is CUDA but this trainer sees no GPU (CPU-only LibTorch, no driver, or "
        "CUDA_VISIBLE_DEVICES empty); use device.kind CPU");
  }
  // LOCAL_RANK picks the GPU among those visible; the daemon exposes exactly one per rank.
  absl::StatusOr<int> index =
      LocalRankDevice(env.local_rank, static_cast<int>(at::getNumGPUs()),
                      env.device.cuda_visible_devices, /*daemon_launch=*/!env.coordinator.empty());
  if (!index.ok()) return index.status();
  // The current device before anything is allocated: the caching allocator of the current
  // device serves every allocation made without a device guard (and NCCL, cuBLAS and the
  // autograd engine's forward-side work use it), so all of this rank's memory lands on its GPU.
  const c10::DeviceIndex device = static_cast<c10::DeviceIndex>(*index);
  absl::Status set =
      TorchCall("set the current CUDA device", [&] { at::accelerator::setDeviceIndex(device); });
  if (!set.ok()) return set;
  return at::Device(at::kCUDA, device);
}

absl::StatusOr<std::unique_ptr<data::TokenDataset>> OpenDataset(const TrainerConfig& c) {
  data::TokenDataset::Options o{c.data_path, c.data_format, c.val_fraction, c.seq_len,
                                c.model.vocab_size};
  o.paths = c.data_paths;
  o.val_path = c.val_path;
  return data::TokenDataset::Open(o);
}

// data.vocab_path: loaded (and the prompt encoded once) now, not after training. Null without it.
absl::StatusOr<std::unique_ptr<data::TokenVocab>> LoadVocab(const TrainerConfig& c) {
  if (c.vocab_path.empty()) return std::unique_ptr<data::TokenVocab>();
  ASSIGN_OR_RETURN(std::unique_ptr<data::TokenVocab> vocab, data::TokenVocab::Load(c.vocab_path));
  if (!c.sample_prompt.empty()) RETURN_IF_ERROR(vocab->Encode(c.sample_prompt).status());
  return vocab;
}

absl::Status MoveModelToDevice(models::LanguageModel& model, at::Device device, int rank) {
  // A deferred model's parameters have nothing to move (the engine builds their shards on
  // `device`); its buffers (a scripted model's causal mask) hold their values and move.
  absl::Status moved = TorchCall("move model", [&] {
    if (model.deferred_init() == nullptr) {
      model.module().to(device);
      return;
    }
    at::NoGradGuard no_grad;
    for (at::Tensor& b : model.module().buffers(/*recurse=*/true)) b.set_data(b.to(device));
  });
  if (moved.ok() && rank == 0) {
    SL_LOG(INFO) << model.Describe();
  }
  return moved;
}

// Null without --metrics_out.
absl::StatusOr<std::unique_ptr<MetricsWriter>> OpenMetrics(const std::string& path) {
  if (path.empty()) return std::unique_ptr<MetricsWriter>();
  return MetricsWriter::Open(path);
}

// Rank 0's TensorBoard event files (train.tensorboard_dir; under the coordinator one run per job,
// <dir>/<job id>, as checkpoints). Null on other ranks and without the setting; a rank of a
// replica-group fault-tolerant job is told the run's directory, to write it if it comes to lead.
absl::StatusOr<std::unique_ptr<TensorBoardWriter>> OpenTensorBoard(const TrainerConfig& c,
                                                                   const launch::RankEnv& env,
                                                                   TrainLoopOptions& loop) {
  const std::string run = c.tensorboard_dir.empty() || env.job_id.empty()
                              ? c.tensorboard_dir
                              : absl::StrCat(c.tensorboard_dir, "/", env.job_id);
  if (run.empty() || env.rank != 0) {
    if (c.replica_fault_tolerance) loop.tensorboard_dir = run;
    return std::unique_ptr<TensorBoardWriter>();
  }
  ASSIGN_OR_RETURN(std::unique_ptr<TensorBoardWriter> tb, TensorBoardWriter::Open(run));
  loop.tensorboard = tb.get();
  return tb;
}

// The attempt's communicator options: Gloo on CPU, NCCL on CUDA, under the attempt's key prefix.
fsdp::CommOptions CommOptionsFor(const TrainerConfig& c, const launch::RankEnv& env,
                                 at::Device device) {
  fsdp::CommOptions comm;
  comm.backend = c.cuda ? fsdp::CommBackend::kNccl : fsdp::CommBackend::kGloo;
  comm.address = env.advertise_address;
  comm.timeout = absl::Seconds(c.collective_timeout_s);
  if (c.cuda) {
    comm.cuda_device = device.index();
    // NCCL's sockets on the interface of the advertised address (the worker's --address), unless
    // the user set NCCL_SOCKET_IFNAME (the NCCL backend never overrides it). Gloo keeps binding
    // to the address itself.
    absl::StatusOr<std::string> ifname = InterfaceForAddress(env.advertise_address);
    if (ifname.ok()) comm.interface = *ifname;
  }
  comm.fake_collectives = c.fake_collectives;  // Shard/replicate groups only; world stays real.
  comm.key_prefix =
      env.job_id.empty() ? "comm" : absl::StrCat("comm/", env.job_id, "/", env.attempt);
  return comm;
}

// The communicators of c.layout (world, shard group, replicate group), bootstrapped through
// `store`. A replacement rank of a replica-group fault-tolerant job gets placeholders (no
// sockets): it builds the live membership's communicators when it joins.
absl::StatusOr<fsdp::CommGroups> CreateCommunicators(const TrainerConfig& c,
                                                     const launch::RankEnv& env, at::Device device,
                                                     fsdp::KvStore* store) {
  if (c.replica_fault_tolerance && env.rank_generation > 0) {
    return ReplicaFaultTolerance::PlaceholderGroups(c.layout, env.rank, device.type());
  }
  return fsdp::CreateCommGroups(c.layout, env.rank, store, CommOptionsFor(c, env, device));
}

// fault_tolerance REPLICA_GROUPS: the step gate over the coordinator's votes, owning the
// communicators from now on (a replacement rank must JoinRunningJob next). Null otherwise.
absl::StatusOr<std::unique_ptr<ReplicaFaultTolerance>> StartFaultTolerance(
    const TrainerConfig& c, const launch::RankEnv& env, at::Device device, fsdp::KvStore* store,
    fsdp::CommGroups& groups, FsdpBackend* fsdp, TrainerCheckpointing* ckpt,
    std::unique_ptr<StepVoter>& voter, TrainLoopOptions& loop) {
  if (!c.replica_fault_tolerance) return std::unique_ptr<ReplicaFaultTolerance>();
  if (fsdp == nullptr || env.coordinator.empty() || env.job_id.empty()) {
    return absl::InvalidArgumentError(
        "fault_tolerance mode REPLICA_GROUPS needs the FSDP backend and a coordinator (run the "
        "job with shardctl submit)");
  }
  CoordinatorStepVoterOptions vo;
  vo.address = env.coordinator;
  vo.token = env.rdzv_secret;
  vo.job_id = env.job_id;
  vo.attempt = env.attempt;
  vo.rank = env.rank;
  vo.generation = env.rank_generation;
  ASSIGN_OR_RETURN(voter, MakeCoordinatorStepVoter(vo));
  ReplicaFaultToleranceOptions o;
  o.layout = c.layout;
  o.rank = env.rank;
  o.seed = c.seed;
  o.digest_every_steps = c.ft_digest_every_steps;
  o.comm = CommOptionsFor(c, env, device);
  o.store = store;
  o.voter = voter.get();
  o.device = device.type();
  o.should_stop = loop.should_stop;
  const bool joining = env.rank_generation > 0;
  ASSIGN_OR_RETURN(std::unique_ptr<ReplicaFaultTolerance> ft,
                   ReplicaFaultTolerance::Create(o, fsdp, ckpt, std::move(groups), joining));
  loop.gate = ft.get();
  return ft;
}

// A replacement rank: admitted by the coordinator, healed from a live replica group; training
// continues after the step the live groups last committed.
absl::Status JoinRunningJob(const launch::RankEnv& env, ReplicaFaultTolerance& ft,
                            TrainLoopOptions& loop) {
  SL_LOG(INFO) << "replacement rank (generation " << env.rank_generation
               << "): joining the running job";
  absl::StatusOr<JoinPoint> at = ft.Join();
  if (!at.ok()) return at.status();
  loop.start_step = at->steps_done;
  loop.start_cursor = {at->data_epoch, at->data_position};
  return absl::OkStatus();
}

// The FSDP engine and its sharded optimizer around `model`.
absl::StatusOr<std::unique_ptr<FsdpBackend>> BuildEngine(models::LanguageModel& model,
                                                         const TrainerConfig& c,
                                                         const launch::RankEnv& env,
                                                         const fsdp::CommGroups& groups,
                                                         at::Device device) {
  // In TorchCall: the optimizer state's allocations may run out of memory (a thrown c10 error).
  absl::StatusOr<std::unique_ptr<FsdpBackend>> backend;
  absl::Status built = TorchCall("build the FSDP backend", [&] {
    backend = FsdpBackend::Create(model, c, env.rank,
                                  {groups.world.get(), groups.shard.get(), groups.replicate.get()},
                                  device);
  });
  if (!built.ok()) return built;
  return backend;
}

// The training backend and what it runs over, declared in the order they must outlive each
// other: the FSDP engine over communicators bootstrapped through the store (the sharded optimizer
// and checkpoints live there), or with --backend local the single-process reference.
struct Backend {
  std::unique_ptr<fsdp::KvStore> store;
  fsdp::CommGroups groups;
  std::unique_ptr<FsdpBackend> fsdp;  // null with --backend local
  std::unique_ptr<LocalBackend> local;
  TrainingBackend* backend = nullptr;  // one of the two
};

// Builds `b`; returns the exit code of the step that failed, kExitOk when built.
int BuildBackend(const Args& args, const TrainerConfig& c, const launch::RankEnv& env,
                 at::Device device, models::LanguageModel& model, Backend& b) {
  if (args.backend == "local") {
    absl::StatusOr<std::unique_ptr<LocalBackend>> local = LocalBackend::Create(model.module(), c);
    if (!local.ok()) return Fail(launch::kExitBadSpec, "backend", local.status());
    b.local = *std::move(local);
    b.backend = b.local.get();
    return launch::kExitOk;
  }
  absl::StatusOr<std::unique_ptr<fsdp::KvStore>> store =
      CreateBootstrapStore(env, absl::Seconds(c.collective_timeout_s));
  if (!store.ok()) return Fail(launch::kExitCommFailure, "rendezvous", store.status());
  b.store = *std::move(store);
  absl::StatusOr<fsdp::CommGroups> groups = CreateCommunicators(c, env, device, b.store.get());
  if (!groups.ok()) return Fail(launch::kExitCommFailure, "communicators", groups.status());
  b.groups = *std::move(groups);
  absl::StatusOr<std::unique_ptr<FsdpBackend>> fsdp = BuildEngine(model, c, env, b.groups, device);
  if (!fsdp.ok()) return FailEngine(fsdp.status());
  b.fsdp = *std::move(fsdp);
  b.backend = b.fsdp.get();
  return launch::kExitOk;
}

void LogBackend(const TrainingBackend& backend, int rank) {
  if (rank != 0) return;
  SL_LOG(INFO) << backend.Describe() << "; this rank holds " << backend.StateBytes() / 1048576.0
               << " MiB of parameter, gradient and optimizer state";
}

// Waits for an asynchronous save still in flight; rank 0 logs the result and prints the sample.
absl::Status FinishAndReport(TrainerCheckpointing* ckpt, const TrainSummary& summary, bool leader) {
  if (ckpt != nullptr) {
    absl::Status finished = ckpt->Finish();
    if (!finished.ok()) return finished;
  }
  if (leader) {
    SL_LOG(INFO) << "finished " << summary.steps << " steps: train loss "
                 << (summary.train_losses.empty() ? NAN : summary.train_losses.back())
                 << ", val loss " << summary.final_val_loss.value_or(NAN);
    if (!summary.sample.empty()) std::cout << summary.sample << std::endl;
  }
  return absl::OkStatus();
}

// ---- Main
// ----------------------------------------------------------------------------------------

// How long the teardown after a communication failure on CUDA may take before the process exits
// without it (see EndAfterCommFailure).
constexpr absl::Duration kCommFailureTeardownBound = absl::Seconds(20);

// Training failed with a communication error on CUDA (a lost or stopped peer): what is left is to
// exit with `code`, within a bound. Abandon every communicator, so that their teardown aborts
// instead of finalizing: NCCL's finalize completes only once the communicator is "globally
// quiescent", so with a dead peer each non-aborted communicator held the exit for its full
// timeout. And a backstop (PyTorch's NCCL watchdog has one too): ncclCommAbort itself may wait
// for peer processes on the node, so if the teardown has not ended after
// kCommFailureTeardownBound the process exits with `code` without it. The failure line is
// already logged.
void EndAfterCommFailure(fsdp::CommGroups& groups, int code) {
  for (fsdp::Communicator* comm :
       {groups.world.get(), groups.shard.get(), groups.replicate.get()}) {
    if (comm != nullptr) comm->Abandon();
  }
  std::thread([code] {
    absl::SleepFor(kCommFailureTeardownBound);
    // Plain write(2): the logger's statics may be going away with the rest of the process.
    static constexpr char kMessage[] =
        "trainer: the communicators' teardown did not end within 20s after the communication "
        "failure; exiting without it\n";
    (void)!write(STDERR_FILENO, kMessage, sizeof(kMessage) - 1);
    std::_Exit(code);
  }).detach();
}

int Main(int argc, char** argv) {
  // 1. Flags, environment and job spec.
  absl::StatusOr<Args> args = ParseFlags(argc, argv);
  if (!args.ok()) return FailFlags(args.status());
  absl::StatusOr<launch::RankEnv> env = SetUpEnvironment();
  if (!env.ok()) return Fail(launch::kExitBadSpec, "environment", env.status());
  absl::StatusOr<TrainerConfig> config = LoadConfig(*args, *env);
  if (!config.ok()) return Fail(launch::kExitBadSpec, "job spec " + args->spec, config.status());
  const TrainerConfig& c = *config;
  absl::StatusOr<TrainLoopOptions> loop = LoopOptions(c, *env);
  if (!loop.ok()) return Fail(launch::kExitBadSpec, "environment", loop.status());
  ConfigureProcess(c);

  // 2. This rank's device, data, model and metrics files.
  absl::StatusOr<at::Device> device = SelectDevice(c, *env);
  if (!device.ok()) return Fail(launch::kExitBadSpec, "device", device.status());
  absl::StatusOr<std::unique_ptr<data::TokenDataset>> dataset = OpenDataset(c);
  if (!dataset.ok()) return Fail(launch::kExitDataError, "data", dataset.status());
  absl::StatusOr<std::unique_ptr<data::TokenVocab>> vocab = LoadVocab(c);
  if (!vocab.ok()) return Fail(launch::kExitDataError, "data", vocab.status());
  loop->vocab = vocab->get();
  // Sharded initialization for the FSDP engine: the GPT and Llama parameters get no memory here;
  // the engine builds only this rank's shards (models/init.h). The local backend needs them all.
  absl::StatusOr<std::unique_ptr<models::LanguageModel>> model =
      models::CreateModel(c.model, args->backend == "local" ? models::InitMode::kMaterialized
                                                            : models::InitMode::kDeferred);
  if (!model.ok()) return FailModel(model.status());
  absl::Status moved = MoveModelToDevice(**model, *device, env->rank);
  if (!moved.ok()) return Fail(launch::kExitInternal, "model", moved);
  absl::StatusOr<std::unique_ptr<MetricsWriter>> metrics = OpenMetrics(args->metrics_out);
  if (!metrics.ok()) return Fail(launch::kExitBadSpec, "metrics", metrics.status());
  loop->metrics = metrics->get();
  absl::StatusOr<std::unique_ptr<TensorBoardWriter>> tensorboard = OpenTensorBoard(c, *env, *loop);
  if (!tensorboard.ok()) return Fail(launch::kExitBadSpec, "tensorboard", tensorboard.status());

  // 3. The backend (no checkpoints with --backend local).
  Backend b;
  if (int code = BuildBackend(*args, c, *env, *device, **model, b); code != launch::kExitOk) {
    return code;
  }
  LogBackend(*b.backend, env->rank);

  // 4. Checkpoints: at every attempt's start, that checkpoint.dir is one directory on every
  //    rank's worker; then resume (or initialize from safetensors or model.hf_dir), then save
  //    per the spec's policy.
  std::unique_ptr<TrainerCheckpointing> ckpt;
  if (b.fsdp != nullptr) {
    absl::Status shared = CheckCheckpointDir(c, *env, *device, b.store.get(), b.groups.world.get());
    if (!shared.ok()) return FailCheckpointDir(shared);
  }
  if (WantsCheckpoints(c)) {
    absl::StatusOr<std::unique_ptr<TrainerCheckpointing>> created =
        CreateCheckpointing(c, *env, b.fsdp.get(), args->metrics_out);
    if (!created.ok()) return Fail(launch::kExitBadSpec, "checkpoint", created.status());
    ckpt = *std::move(created);
  }
  // A REPLICA_GROUPS job's steps are voted on; the coordinator never preempts one.
  if (ckpt != nullptr && !c.replica_fault_tolerance) EnablePreemption(ckpt.get(), *loop);
  const bool joining = c.replica_fault_tolerance && env->rank_generation > 0;
  absl::Status restored = RestoreCheckpoint(ckpt.get(), *loop, joining);
  if (!restored.ok()) return FailRestore(restored);

  // 5. fault_tolerance REPLICA_GROUPS: the per-step vote (a replacement rank joins and is
  //    healed here). Then train, finish the last save and report.
  std::unique_ptr<StepVoter> voter;
  absl::StatusOr<std::unique_ptr<ReplicaFaultTolerance>> ft = StartFaultTolerance(
      c, *env, *device, b.store.get(), b.groups, b.fsdp.get(), ckpt.get(), voter, *loop);
  if (!ft.ok()) return Fail(launch::kExitBadSpec, "fault_tolerance", ft.status());
  if (joining) {
    absl::Status joined = JoinRunningJob(*env, **ft, *loop);
    if ((*ft)->left()) return Fail(launch::kExitLeftReplicaGroup, "fault tolerance", joined);
    if (!joined.ok()) return FailTraining(joined, StopSignal());
  }
  absl::StatusOr<TrainSummary> summary = RunTraining(c, **model, *b.backend, **dataset, *loop);
  if (*ft != nullptr && (*ft)->left()) {
    return Fail(launch::kExitLeftReplicaGroup, "fault tolerance", summary.status());
  }
  if (!summary.ok()) {
    const int code = FailTraining(summary.status(), StopSignal());
    if (c.cuda && IsCommError(summary.status())) EndAfterCommFailure(b.groups, code);
    return code;
  }
  if (int64_t at = summary->preempted_after_step; at > 0) {
    return EndPreempted(ckpt.get(), at, StopSignal);
  }
  if (b.fsdp != nullptr) {
    SL_LOG(INFO) << b.fsdp->MemorySummary();
  }
  const bool leader = *ft != nullptr ? (*ft)->leader() : env->rank == 0;
  absl::Status finished = FinishAndReport(ckpt.get(), *summary, leader);
  if (!finished.ok()) return Fail(launch::kExitInternal, "checkpoint", finished);
  if (CpuMemoryPeak() > 0) {
    SL_LOG(INFO) << "CPU memory cap: peak " << CpuMemoryPeak() / 1048576.0 << " MiB of tensors";
  }
  return launch::kExitOk;
}

}  // namespace
}  // namespace shardline::trainer

int main(int argc, char** argv) { return shardline::trainer::Main(argc, argv); }
