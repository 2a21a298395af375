// trainer: one rank of a training job, started like a torchrun worker.
//
//   trainer --spec FILE [--set path=value ...] [--metrics_out FILE] [--backend fsdp|local]
//
// Environment: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT (see trainer_config.h);
// SHARDLINE_PEAK_FLOPS (FLOP/s of one rank's device, for the MFU estimate; default 1e11 on
// CPU, 989e12 on CUDA, the dense bf16 peak of an H100/H200); SHARDLINE_RESUME_STEP (from the
// worker daemon: when > 0, resume from that checkpoint step instead of checkpoint.resume_step);
// SHARDLINE_TEST_IGNORE_SIGTERM=1 (tests only: SIGTERM is ignored, so only a STOP's SIGKILL ends
// the rank).
// Exit codes: trainer_exit_codes.h. The spec's paths are relative to the spec file. Logs go to
// stderr; the sample to stdout.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/Parallel.h>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/coordinator_reporter.h"
#include "checkpoint/trainer_checkpointing.h"
#include "common/logging.h"
#include "common/torch_status.h"
#include "data/token_dataset.h"
#include "fsdp/comm_groups.h"
#include "models/model_factory.h"
#include "worker/train_loop.h"
#include "worker/trainer_config.h"
#include "worker/trainer_exit_codes.h"
#include "worker/trainer_fsdp_backend.h"
#include "worker/trainer_local_backend.h"
#include "worker/trainer_metrics.h"
#include "worker/trainer_store.h"

namespace shardline::worker {
namespace {

std::atomic<int> g_stop_signal{0};

void OnSignal(int signo) { g_stop_signal.store(signo); }

constexpr char kUsage[] =
    "usage: trainer --spec FILE [--set path=value ...] [--metrics_out FILE]\n"
    "               [--backend fsdp|local]\n"
    "  Runs one rank; RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT come from the\n"
    "  environment as torchrun sets them (all unset: one process).\n"
    "  --set overrides any spec field, e.g. --set fsdp.hybrid_shard_degree=2 --set train.steps=50\n"
    "  --backend: fsdp (the FSDP engine at any W; the default, also called auto) or local (one\n"
    "             process, plain torch::optim: the reference the engine is tested against)\n";

struct Args {
  std::string spec;
  std::vector<std::string> sets;
  std::string metrics_out;
  std::string backend = "auto";
};

// Flags are parsed by hand so that --set values may contain commas and '=' (YAML flow maps).
absl::StatusOr<Args> ParseArgs(int argc, char** argv) {
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

int Fail(int code, absl::string_view phase, const absl::Status& status) {
  SL_LOG(ERROR) << phase << ": " << status.message() << " ["
                << absl::StatusCodeToString(status.code()) << "; exit " << code << "]";
  return code;
}

bool IsCommError(const absl::Status& s) {
  return s.code() == absl::StatusCode::kUnavailable ||
         s.code() == absl::StatusCode::kDeadlineExceeded ||
         s.code() == absl::StatusCode::kFailedPrecondition;
}

int Main(int argc, char** argv) {
  auto args = ParseArgs(argc, argv);
  if (!args.ok()) {
    if (args.status().code() == absl::StatusCode::kCancelled) {
      std::cout << args.status().message();
      return kExitOk;
    }
    std::cerr << "trainer: " << args.status().message();
    return kExitBadSpec;
  }
  auto env = ReadRankEnv();
  if (!env.ok()) return Fail(kExitBadSpec, "environment", env.status());
  SetLogPrefix(absl::StrCat("rank ", env->rank));

  auto config = LoadTrainerConfig(args->spec, args->sets, *env);
  if (!config.ok())
    return Fail(kExitBadSpec, absl::StrCat("job spec ", args->spec), config.status());
  const TrainerConfig& c = *config;
  if (env->rank == 0) {
    SL_LOG(INFO) << "job " << c.job_name << ": " << c.layout.DebugString() << ", "
                 << c.accumulation_steps << " micro-batch(es) of " << c.micro_batch_size
                 << " per rank per step; resolved spec:\n"
                 << c.spec_yaml;
  }

  // Tests only: SHARDLINE_TEST_IGNORE_SIGTERM=1 makes the trainer ignore SIGTERM, a rank that
  // holds its slot through the whole STOP grace period until SIGKILL (docs/failures.md).
  const char* ignore_term = getenv("SHARDLINE_TEST_IGNORE_SIGTERM");
  const bool ignore = ignore_term != nullptr && std::string(ignore_term) == "1";
  if (ignore) SL_LOG(WARNING) << "SHARDLINE_TEST_IGNORE_SIGTERM=1: ignoring SIGTERM (tests only)";
  signal(SIGTERM, ignore ? SIG_IGN : OnSignal);
  signal(SIGINT, OnSignal);
  if (c.cpu_threads > 0) at::set_num_threads(c.cpu_threads);
  if (c.deterministic) {
    // cuBLAS is deterministic only with a fixed workspace (must be set before CUDA starts); on
    // CUDA, ops without a deterministic kernel warn instead of failing the job.
    if (c.cuda) setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
    at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/c.cuda);
  }

  at::Device device = at::kCPU;
  if (c.cuda) {
    if (!at::hasCUDA()) {
      return Fail(kExitBadSpec, "device",
                  absl::InvalidArgumentError(
                      "device.kind is CUDA but this trainer sees no GPU (CPU-only LibTorch, no "
                      "driver, or CUDA_VISIBLE_DEVICES empty); use device.kind CPU"));
    }
    // LOCAL_RANK picks the GPU among those visible; the daemon exposes exactly one per rank.
    const int count = static_cast<int>(at::getNumGPUs());
    device = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(env->local_rank % count));
  }

  auto dataset = data::TokenDataset::Open(
      {c.data_path, c.data_format, c.val_fraction, c.seq_len, c.model.vocab_size});
  if (!dataset.ok()) return Fail(kExitDataError, "data", dataset.status());

  auto model = models::CreateModel(c.model);
  if (!model.ok()) return Fail(kExitBadSpec, "model", model.status());
  absl::Status moved = TorchCall("move model", [&] { (*model)->module().to(device); });
  if (!moved.ok()) return Fail(kExitInternal, "model", moved);
  if (env->rank == 0) SL_LOG(INFO) << (*model)->Describe();

  std::unique_ptr<MetricsWriter> metrics;
  if (!args->metrics_out.empty()) {
    auto opened = MetricsWriter::Open(args->metrics_out);
    if (!opened.ok()) return Fail(kExitBadSpec, "metrics", opened.status());
    metrics = std::move(*opened);
  }

  // The backend: the FSDP engine at any W (the sharded optimizer and checkpoints live there), or
  // with --backend local the single-process reference (no checkpoints).
  const bool wants_checkpoints = !c.checkpoint_dir.empty() || !c.init_from_safetensors.empty();
  const bool use_fsdp = args->backend != "local";
  std::unique_ptr<fsdp::KvStore> store;
  fsdp::CommGroups groups;
  std::unique_ptr<TrainingBackend> backend;
  const absl::Duration timeout = absl::Seconds(c.collective_timeout_s);
  if (use_fsdp) {
    auto s = CreateBootstrapStore(*env, timeout);
    if (!s.ok()) return Fail(kExitCommFailure, "rendezvous", s.status());
    store = std::move(*s);
    fsdp::CommOptions comm;
    comm.backend = c.cuda ? fsdp::CommBackend::kNccl : fsdp::CommBackend::kGloo;
    comm.address = env->advertise_address;
    comm.timeout = timeout;
    if (c.cuda) comm.cuda_device = device.index();
    comm.fake_collectives = c.fake_collectives;  // Shard/replicate groups only; world stays real.
    comm.key_prefix =
        env->job_id.empty() ? "comm" : absl::StrCat("comm/", env->job_id, "/", env->attempt);
    auto g = fsdp::CreateCommGroups(c.layout, env->rank, store.get(), comm);
    if (!g.ok()) return Fail(kExitCommFailure, "communicators", g.status());
    groups = std::move(*g);
    auto b = FsdpBackend::Create(**model, c, env->rank,
                                 {groups.world.get(), groups.shard.get(), groups.replicate.get()});
    if (!b.ok()) {
      return Fail(IsCommError(b.status()) ? kExitCommFailure : kExitBadSpec, "fsdp", b.status());
    }
    backend = std::move(*b);
  } else {
    auto b = LocalBackend::Create((*model)->module(), c);
    if (!b.ok()) return Fail(kExitBadSpec, "backend", b.status());
    backend = std::move(*b);
  }
  if (env->rank == 0) {
    SL_LOG(INFO) << backend->Describe() << "; this rank holds " << backend->StateBytes() / 1048576.0
                 << " MiB of parameter, gradient and optimizer state";
  }

  // Checkpoints: resume (or initialize from safetensors), then save per the spec's policy.
  std::unique_ptr<checkpoint::TrainerCheckpointing> ckpt;
  checkpoint::TrainingProgress start;
  if (wants_checkpoints) {
    auto* fb = dynamic_cast<FsdpBackend*>(backend.get());
    if (fb == nullptr) {
      return Fail(kExitBadSpec, "checkpoint",
                  absl::InvalidArgumentError("checkpoint.dir / init_from_safetensors need the "
                                             "FSDP backend (--backend fsdp or auto)"));
    }
    checkpoint::CheckpointPolicy policy;
    // Under the coordinator each job gets its own directory <dir>/<job id>, shared by the job's
    // attempts (a restarted attempt resumes from the latest checkpoint there).
    policy.dir = c.checkpoint_dir.empty() || env->job_id.empty()
                     ? c.checkpoint_dir
                     : absl::StrCat(c.checkpoint_dir, "/", env->job_id);
    policy.every_steps = c.checkpoint_every_steps;
    policy.keep_last = c.checkpoint_keep_last;
    policy.async_save = c.checkpoint_async;
    policy.save_final = c.checkpoint_save_final;
    policy.resume_step = c.resume_step;
    int64_t env_resume = 0;
    if (const char* r = std::getenv("SHARDLINE_RESUME_STEP");
        r != nullptr && absl::SimpleAtoi(r, &env_resume) && env_resume > 0) {
      policy.resume_step = env_resume;
    }
    policy.init_from_safetensors = c.init_from_safetensors;
    policy.total_steps = c.steps;
    policy.optimizer_kind = c.optimizer == OptimizerKind::kSgd ? "sgd" : "adamw";
    policy.job_id = env->job_id;
    policy.attempt = env->attempt;
    policy.commit_timeout = timeout;
    if (!env->coordinator.empty() && !env->job_id.empty()) {
      auto reporter = checkpoint::MakeCoordinatorReporter(
          {env->coordinator, env->token, env->job_id, env->attempt, env->rank});
      if (!reporter.ok()) return Fail(kExitBadSpec, "checkpoint reports", reporter.status());
      policy.on_saved = *std::move(reporter);
    }
    auto created = checkpoint::TrainerCheckpointing::Create(policy, fb->engine(), fb->optimizer(),
                                                            fb->world());
    if (!created.ok()) return Fail(kExitBadSpec, "checkpoint", created.status());
    ckpt = std::move(*created);
    auto restored = ckpt->Restore();
    if (!restored.ok()) {
      const absl::Status& s = restored.status();
      return Fail(IsCommError(s) && s.code() != absl::StatusCode::kFailedPrecondition
                      ? kExitCommFailure
                      : kExitDataError,
                  "checkpoint", s);
    }
    start = *restored;
  }

  TrainLoopOptions loop;
  loop.start_step = start.step;
  loop.start_cursor = {start.data_epoch, start.data_position};
  if (ckpt != nullptr) {
    loop.after_step = [&ckpt](int64_t done, const data::DataCursor& next) {
      return ckpt->AfterStep(done, next.epoch, next.position);
    };
  }
  loop.rank = env->rank;
  loop.world_size = env->world_size;
  loop.metrics = metrics.get();
  loop.should_stop = [] { return g_stop_signal.load() != 0; };
  loop.peak_flops_per_rank = c.cuda ? 989e12 : 1e11;
  if (const char* peak = std::getenv("SHARDLINE_PEAK_FLOPS")) {
    double v = 0;
    if (absl::SimpleAtod(peak, &v) && v > 0) loop.peak_flops_per_rank = v;
  }
  auto summary = RunTraining(c, **model, *backend, **dataset, loop);
  if (!summary.ok()) {
    const absl::Status& s = summary.status();
    if (s.code() == absl::StatusCode::kCancelled) {
      const int signo = g_stop_signal.load();
      Fail(kExitSignalBase + signo, "stopped", s);
      return kExitSignalBase + signo;
    }
    if (s.code() == absl::StatusCode::kAborted) return Fail(kExitDiverged, "training", s);
    if (IsCommError(s)) return Fail(kExitCommFailure, "training", s);
    if (s.code() == absl::StatusCode::kInvalidArgument) return Fail(kExitDataError, "data", s);
    return Fail(kExitInternal, "training", s);
  }
  if (ckpt != nullptr) {
    absl::Status finished = ckpt->Finish();  // An asynchronous save still in flight.
    if (!finished.ok()) return Fail(kExitInternal, "checkpoint", finished);
  }
  if (env->rank == 0) {
    SL_LOG(INFO) << "finished " << summary->steps << " steps: train loss "
                 << (summary->train_losses.empty() ? NAN : summary->train_losses.back())
                 << ", val loss " << summary->final_val_loss.value_or(NAN);
    if (!summary->sample.empty()) std::cout << summary->sample << std::endl;
  }
  return kExitOk;
}

}  // namespace
}  // namespace shardline::worker

int main(int argc, char** argv) { return shardline::worker::Main(argc, argv); }
