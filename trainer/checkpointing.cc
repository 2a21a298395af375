#include "trainer/checkpointing.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "checkpoint/dcp_load.h"
#include "checkpoint/format.h"
#include "checkpoint/manifest_io.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/torch_status.h"
#include "hf/weights.h"

namespace shardline::trainer {
namespace {

constexpr char kTestPauseEnv[] = "SHARDLINE_TEST_PAUSE_IN_SAVE";

// The test pause of the header comment, from the environment; an empty function when unset or
// for another attempt or rank. Read here, not through the launch contract (launch/rank_env.h):
// a test-only hook, set on a worker daemon by a test and inherited by its trainers, which the
// daemon never writes. The attempt and rank it is compared with are the launch's, as given.
absl::StatusOr<std::function<void(int)>> TestPauseFromEnv(
    std::shared_ptr<std::atomic<int64_t>> saving_step, int32_t my_attempt, int my_rank) {
  const char* value = std::getenv(kTestPauseEnv);
  if (value == nullptr || *value == '\0') return std::function<void(int)>();
  const std::vector<std::string> parts = absl::StrSplit(value, ':');
  int64_t step = 0, shard = 0, seconds = 0, attempt = 0, rank = -1;
  if (parts.size() < 3 || parts.size() > 5 || !absl::SimpleAtoi(parts[0], &step) ||
      !absl::SimpleAtoi(parts[1], &shard) || !absl::SimpleAtoi(parts[2], &seconds) ||
      (parts.size() >= 4 && !absl::SimpleAtoi(parts[3], &attempt)) ||
      (parts.size() == 5 && !absl::SimpleAtoi(parts[4], &rank))) {
    return absl::InvalidArgumentError(absl::StrCat(
        kTestPauseEnv, "=", value, ": expected STEP:SHARD:SECONDS[:ATTEMPT[:RANK]] (tests only)"));
  }
  if ((attempt > 0 && attempt != my_attempt) || (rank >= 0 && rank != my_rank)) {
    return std::function<void(int)>();
  }
  return std::function<void(int)>([=](int shard_index) {
    if (shard_index != shard || saving_step->load() != step) return;
    std::fprintf(stderr, "test pause in save: step %lld shard %d for %llds (%s)\n",
                 static_cast<long long>(step), shard_index, static_cast<long long>(seconds),
                 kTestPauseEnv);
    std::fflush(stderr);
    absl::SleepFor(absl::Seconds(seconds));
  });
}

}  // namespace

absl::StatusOr<std::unique_ptr<TrainerCheckpointing>> TrainerCheckpointing::Create(
    const CheckpointPolicy& policy, fsdp::FsdpEngine* engine, fsdp::ShardedOptimizer* optimizer,
    fsdp::Communicator* world) {
  std::unique_ptr<checkpoint::Checkpointer> ckpt;
  auto saving_step = std::make_shared<std::atomic<int64_t>>(-1);
  if (!policy.dir.empty()) {
    checkpoint::Checkpointer::Options o;
    o.root = policy.dir;
    o.keep_last = policy.keep_last;
    o.optimizer_kind = policy.optimizer_kind;
    o.job_id = policy.job_id;
    o.attempt = policy.attempt;
    o.commit_timeout = policy.commit_timeout;
    o.on_saved = policy.on_saved;
    o.report_commit = policy.report_commit;
    ASSIGN_OR_RETURN(o.test_after_data_file,
                     TestPauseFromEnv(saving_step, policy.attempt, engine->rank()));
    ASSIGN_OR_RETURN(ckpt, checkpoint::Checkpointer::Create(o, engine, optimizer, world));
  }
  return std::unique_ptr<TrainerCheckpointing>(new TrainerCheckpointing(
      policy, engine, optimizer, world, std::move(ckpt), std::move(saving_step)));
}

absl::StatusOr<int64_t> TrainerCheckpointing::ResumeStepOnDisk() {
  const int64_t wanted = policy_.resume_step;
  int64_t chosen = 0;  // Rank 0: the step every rank loads; -1: none.
  absl::Status why;
  if (engine_->rank() == 0) {
    absl::StatusOr<int64_t> found = checkpoint::ResolveStep(policy_.dir, wanted);
    if (found.ok()) {
      chosen = wanted;
    } else if (found.status().code() != absl::StatusCode::kNotFound) {
      why = found.status();
    } else {
      absl::StatusOr<int64_t> newest = checkpoint::ResolveStep(policy_.dir, -1);
      if (newest.ok()) {
        chosen = *newest;
        SL_LOG(WARNING) << "resume step " << wanted << " from the coordinator is not a committed "
                        << "checkpoint on disk (" << found.status().message()
                        << "); falling back to step " << chosen
                        << ", the newest committed checkpoint under " << policy_.dir;
      } else if (newest.status().code() == absl::StatusCode::kNotFound) {
        why = absl::NotFoundError(absl::StrCat(
            "resume step ", wanted, " from the coordinator: ",
            checkpoint::StepDir(policy_.dir, wanted), " is not a committed checkpoint, and no ",
            "committed checkpoint is under ", policy_.dir, "; not starting from scratch"));
      } else {
        why = newest.status();
      }
    }
    if (!why.ok()) chosen = -1;
  }
  // Rank 0's answer to every rank (the others add zeros).
  int64_t step = 0;
  RETURN_IF_ERROR(TorchCall("broadcast the resume step", [&] {
    at::Tensor t = at::full({1}, chosen, at::kLong).to(engine_->device());
    absl::Status s = world_->AllReduce(t, fsdp::ReduceOp::kSum);
    if (!s.ok()) {
      why = why.ok() ? s : why;
      step = -1;
      return;
    }
    step = t.cpu().item<int64_t>();
  }));
  if (!why.ok()) return why;
  if (step < 0) {
    return absl::AbortedError(
        absl::StrCat("resume step ", wanted, ": rank 0 found no committed checkpoint to resume"));
  }
  return step;
}

absl::StatusOr<checkpoint::TrainingProgress> TrainerCheckpointing::Restore() {
  if (ckpt_ != nullptr && policy_.resume_step != 0 && policy_.resume_own) {
    int64_t step = policy_.resume_step;
    if (step > 0 && policy_.fallback_if_missing) {
      ASSIGN_OR_RETURN(step, ResumeStepOnDisk());
    }
    absl::StatusOr<checkpoint::TrainingProgress> p = ckpt_->Load(step);
    if (p.ok()) {
      if (engine_->rank() == 0) {
        SL_LOG(INFO) << "resumed from " << checkpoint::StepDir(policy_.dir, p->step)
                     << " (data epoch " << p->data_epoch << " position " << p->data_position << ")";
        if (step != policy_.resume_step && policy_.report_fallback) {
          absl::Status s = policy_.report_fallback(policy_.resume_step, p->step, policy_.dir);
          if (!s.ok()) {
            SL_LOG(WARNING) << "reporting the checkpoint fallback to the coordinator: " << s;
          }
        }
      }
      return p;
    }
    // Only "there is no checkpoint yet" starts fresh, and only when the latest was asked for.
    const bool none_yet = policy_.resume_step == -1 &&
                          p.status().code() == absl::StatusCode::kNotFound &&
                          absl::StrContains(p.status().message(), "no committed checkpoint under");
    if (!none_yet) return p.status();
  }
  // Nothing of this job's own to resume: continue another job's checkpoint when asked (a
  // restarted attempt with a committed checkpoint of its own resumed that above instead).
  if (!policy_.resume_from.empty() && policy_.resume_step != 0) return ContinueFrom();
  if (!policy_.init_from_dcp.empty()) return StartFromDcp();
  if (!policy_.init_from_safetensors.empty()) {
    RETURN_IF_ERROR(checkpoint::LoadSafetensorsIntoEngine(policy_.init_from_safetensors, engine_));
    if (engine_->rank() == 0) {
      SL_LOG(INFO) << "initialized the weights from " << policy_.init_from_safetensors;
    }
  } else if (!policy_.init_from_hf.empty()) {
    RETURN_IF_ERROR(LoadHfWeights());
    if (engine_->rank() == 0) {
      SL_LOG(INFO) << "initialized the weights from the Hugging Face folder "
                   << policy_.init_from_hf;
    }
  }
  return checkpoint::TrainingProgress();
}

absl::StatusOr<checkpoint::TrainingProgress> TrainerCheckpointing::ContinueFrom() {
  std::string root = policy_.resume_from;
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  int64_t step = -1;  // The newest committed step under root.
  const size_t slash = root.find_last_of('/');
  int64_t named = 0;
  if (slash != std::string::npos &&
      checkpoint::ParseStepDirName(absl::string_view(root).substr(slash + 1), &named)) {
    step = named;
    root = slash == 0 ? "/" : root.substr(0, slash);
  }
  checkpoint::Checkpointer::Options o;
  o.root = root;
  o.optimizer_kind = policy_.optimizer_kind;
  // No job_id: the checkpoint belongs to another job by design; this reader never saves.
  ASSIGN_OR_RETURN(std::unique_ptr<checkpoint::Checkpointer> reader,
                   checkpoint::Checkpointer::Create(o, engine_, optimizer_, world_));
  if (!policy_.resume_from_job.empty()) RETURN_IF_ERROR(CheckContinuedJob(root, step));
  absl::StatusOr<checkpoint::TrainingProgress> p = reader->Load(step);
  if (!p.ok()) {
    return absl::Status(
        p.status().code(),
        absl::StrCat("checkpoint.resume_from ", policy_.resume_from, ": ", p.status().message()));
  }
  if (p->step >= policy_.total_steps) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint.resume_from ", policy_.resume_from, ": its step ", p->step,
        " is not below train.steps ", policy_.total_steps, "; nothing is left to train"));
  }
  if (engine_->rank() == 0) {
    SL_LOG(INFO) << "continued from " << checkpoint::StepDir(root, p->step) << " (step " << p->step
                 << ", data epoch " << p->data_epoch << " position " << p->data_position << ")";
  }
  return p;
}

absl::StatusOr<checkpoint::TrainingProgress> TrainerCheckpointing::StartFromDcp() {
  absl::StatusOr<checkpoint::DcpLoadResult> loaded = checkpoint::LoadDcpIntoEngine(
      policy_.init_from_dcp, policy_.optimizer_kind, engine_, optimizer_);
  if (!loaded.ok()) return loaded.status();
  if (loaded->step >= policy_.total_steps) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint.init_from_dcp ", policy_.init_from_dcp, ": its step ", loaded->step,
        " is not below train.steps ", policy_.total_steps, "; nothing is left to train"));
  }
  if (engine_->rank() == 0) {
    SL_LOG(INFO) << "started from the PyTorch DCP checkpoint " << policy_.init_from_dcp << " ("
                 << loaded->tensors << " tensors"
                 << (loaded->optimizer_state
                         ? absl::StrCat(", optimizer state, step ", loaded->step)
                         : std::string(", weights only: optimizer fresh, step 0"))
                 << ")";
  }
  checkpoint::TrainingProgress p;
  p.step = loaded->step;
  p.cursor_from_step = true;  // The sampler's position after that many steps (train_loop.cc).
  return p;
}

absl::Status TrainerCheckpointing::CheckContinuedJob(const std::string& root, int64_t step) const {
  absl::StatusOr<int64_t> resolved = checkpoint::ResolveStep(root, step);
  if (!resolved.ok()) return resolved.status();  // Load names it the same way
  const std::string manifest =
      absl::StrCat(checkpoint::StepDir(root, *resolved), "/", checkpoint::kManifestFile);
  ASSIGN_OR_RETURN(CheckpointManifest m, checkpoint::ReadManifestFile(manifest));
  if (m.job_id() == policy_.resume_from_job) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      "checkpoint.resume_from ", policy_.resume_from, ": ", manifest, " belongs to job ",
      m.job_id().empty() ? "(none named)" : m.job_id(), ", not to job ", policy_.resume_from_job,
      ", whose checkpoint the coordinator approved; not continued"));
}

absl::Status TrainerCheckpointing::LoadHfWeights() {
  // One tensor of the folder at a time (HF layouts need whole tensors to transpose or permute),
  // of which this rank copies only the ranges its shards hold: never the whole model.
  engine_->ReshardAll();                                        // Gathered copies would be stale.
  std::map<std::string, std::vector<fsdp::ShardSlice>> slices;  // Canonical name -> slices.
  std::map<std::string, std::vector<int64_t>> shapes;
  for (fsdp::ShardSlice& slice : engine_->LocalParamState()) {
    shapes[slice.name] = slice.global_shape;
    slices[slice.name].push_back(std::move(slice));
  }
  const std::map<std::string, std::string> aliases = engine_->aliases();
  std::set<std::string> loaded;
  absl::Status s = hf::ForEachHfWeight(
      policy_.init_from_hf, [&](const std::string& name, const hf::HostTensor& t) {
        auto alias = aliases.find(name);
        const std::string& canonical = alias == aliases.end() ? name : alias->second;
        auto shape = shapes.find(canonical);
        if (shape == shapes.end()) return absl::OkStatus();  // Not a parameter of this model.
        if (shape->second != t.shape) {
          return absl::InvalidArgumentError(
              absl::StrCat("LoadFullParamState: parameter ", canonical, " has shape ",
                           c10::str(at::IntArrayRef(t.shape)), ", model has ",
                           c10::str(at::IntArrayRef(shape->second))));
        }
        loaded.insert(canonical);
        return TorchCall("load Hugging Face weights", [&] {
          at::NoGradGuard no_grad;
          for (const fsdp::ShardSlice& slice : slices[canonical]) {
            const int64_t count = slice.end - slice.start;
            slice.local.copy_(at::from_blob(const_cast<float*>(t.values.data()) + slice.start,
                                            {count}, at::kFloat));
          }
        });
      });
  for (auto it = shapes.begin(); s.ok() && it != shapes.end(); ++it) {
    if (loaded.count(it->first) == 0) {
      s = absl::InvalidArgumentError(
          absl::StrCat("LoadFullParamState: parameter ", it->first, " missing"));
    }
  }
  if (!s.ok() && s.code() == absl::StatusCode::kInvalidArgument &&
      absl::StartsWith(s.message(), "LoadFullParamState")) {
    return absl::Status(s.code(),
                        absl::StrCat("model.hf_dir ", policy_.init_from_hf, ": ", s.message()));
  }
  return s;
}

bool TrainerCheckpointing::SavesAfter(int64_t steps_done) const {
  if (ckpt_ == nullptr) return false;
  const bool periodic = policy_.every_steps > 0 && steps_done % policy_.every_steps == 0;
  const bool final = policy_.save_final && steps_done == policy_.total_steps;
  return periodic || final || steps_done == resave_step_ || steps_done == preempt_step_;
}

absl::Status TrainerCheckpointing::AfterStep(int64_t steps_done, int64_t epoch, int64_t position) {
  if (!SavesAfter(steps_done)) return absl::OkStatus();
  checkpoint::TrainingProgress p;
  p.step = steps_done;
  p.data_epoch = epoch;
  p.data_position = position;
  saving_step_->store(steps_done);
  // The last step's save is synchronous: nothing is left to overlap it with (Finish waits for it
  // before the trainer exits), and with replica-group fault tolerance the vote on the work after
  // the step then covers the whole save, so a failure in it is redone by the live groups.
  const bool last = steps_done == policy_.total_steps;
  const bool async =
      policy_.async_save && !last && steps_done != resave_step_ && steps_done != preempt_step_;
  RETURN_IF_ERROR(ckpt_->Save(p, async));
  if (async) {
    async_save_ = std::make_pair(steps_done, writer_group_);
  } else {
    async_save_.reset();
  }
  return absl::OkStatus();
}

absl::Status TrainerCheckpointing::SetMembership(fsdp::Communicator* world, int writer_group) {
  world_ = world;
  writer_group_ = writer_group;
  if (ckpt_ == nullptr) return absl::OkStatus();
  return ckpt_->SetMembership(world, writer_group);
}

void TrainerCheckpointing::NoteAbort(const std::vector<int>& live, int64_t vote_step) {
  if (ckpt_ == nullptr || !async_save_.has_value()) return;
  const auto [saved_step, writer] = *async_save_;
  if (std::find(live.begin(), live.end(), writer) != live.end()) return;
  async_save_.reset();
  resave_step_ = vote_step;
  SL_LOG(WARNING) << "replica group " << writer << ", the writer of the asynchronous save of step "
                  << saved_step << ", was lost: that save may not commit, so step " << vote_step
                  << " is saved after its update, synchronously";
}

absl::Status TrainerCheckpointing::Finish() {
  if (ckpt_ == nullptr) return absl::OkStatus();
  RETURN_IF_ERROR(ckpt_->WaitForPendingSave());
  return ckpt_->WaitForCommitReports();
}

}  // namespace shardline::trainer
