#include "trainer/replica_fault_tolerance.h"

#include <cstring>
#include <utility>

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "fsdp/no_op_communicator.h"
#include "fsdp/replica_state.h"

namespace shardline::trainer {
namespace {

bool IsCommFailure(const absl::Status& s) {
  return s.code() == absl::StatusCode::kUnavailable ||
         s.code() == absl::StatusCode::kDeadlineExceeded ||
         s.code() == absl::StatusCode::kFailedPrecondition;
}

std::string Groups(const std::vector<int>& groups) {
  return absl::StrCat("[", absl::StrJoin(groups, ", "), "]");
}

}  // namespace

fsdp::CommGroups ReplicaFaultTolerance::PlaceholderGroups(const fsdp::ParallelLayout& layout,
                                                          int rank, at::DeviceType device) {
  fsdp::CommGroups g;
  g.world = std::make_unique<fsdp::NoOpCommunicator>("world", rank, layout.world_size(), device);
  g.shard = std::make_unique<fsdp::NoOpCommunicator>(
      absl::StrCat("shard[", layout.ReplicateIndex(rank), "]"), layout.ShardIndex(rank),
      layout.shard_degree(), device);
  g.replicate = std::make_unique<fsdp::NoOpCommunicator>(
      absl::StrCat("replicate[", layout.ShardIndex(rank), "]"), layout.ReplicateIndex(rank),
      layout.replicate_degree(), device);
  return g;
}

absl::StatusOr<std::unique_ptr<ReplicaFaultTolerance>> ReplicaFaultTolerance::Create(
    const ReplicaFaultToleranceOptions& options, FsdpBackend* backend,
    TrainerCheckpointing* checkpointing, fsdp::CommGroups initial, bool joining) {
  if (options.store == nullptr || options.voter == nullptr || backend == nullptr) {
    return absl::InvalidArgumentError(
        "replica-group fault tolerance needs a store, a voter and the FSDP backend");
  }
  auto ft = std::unique_ptr<ReplicaFaultTolerance>(
      new ReplicaFaultTolerance(options, backend, checkpointing, std::move(initial)));
  if (joining) {
    ft->current_is_placeholder_ = true;
    ft->live_.clear();
    ft->builds_in_epoch_ = 0;
    ft->broken_ = absl::FailedPreconditionError("a replacement rank has not joined yet");
  }
  return ft;
}

ReplicaFaultTolerance::ReplicaFaultTolerance(const ReplicaFaultToleranceOptions& options,
                                             FsdpBackend* backend,
                                             TrainerCheckpointing* checkpointing,
                                             fsdp::CommGroups initial)
    : options_(options),
      backend_(backend),
      checkpointing_(checkpointing),
      placeholders_(PlaceholderGroups(options.layout, options.rank, options.device)),
      current_(std::move(initial)) {
  for (int g = 0; g < options_.layout.replicate_degree(); ++g) live_.push_back(g);
}

bool ReplicaFaultTolerance::leader() const {
  // The lowest live group's first rank.
  const fsdp::ParallelLayout& layout = options_.layout;
  return !live_.empty() && layout.ReplicateIndex(options_.rank) == live_.front() &&
         layout.ShardIndex(options_.rank) == 0;
}

void ReplicaFaultTolerance::BeginStep(int64_t step) {
  // Per (seed, rank, step): a step trained again, or by a replacement of this rank, draws the
  // same dropout masks.
  const uint64_t seed = options_.seed + 1000003ULL * static_cast<uint64_t>(options_.rank) +
                        0x9E3779B97F4A7C15ULL * static_cast<uint64_t>(step);
  at::manual_seed(seed);
  digest_.reset();
  if (options_.digest_every_steps > 0 && step % options_.digest_every_steps == 0 && broken_.ok()) {
    absl::StatusOr<uint64_t> d = fsdp::StateDigest(*backend_->engine(), backend_->optimizer());
    if (d.ok()) {
      digest_ = *d;
    } else {
      SL_LOG(WARNING) << "state digest at step " << step << ": " << d.status();
    }
  }
}

void ReplicaFaultTolerance::TearDown(bool abandon) {
  backend_->engine()->DropStepGradients();
  if (!current_is_placeholder_) {
    absl::Status s = backend_->SetCommunicators(
        {placeholders_.world.get(), placeholders_.shard.get(), placeholders_.replicate.get()});
    if (!s.ok()) {
      SL_LOG(ERROR) << "pointing the engine at placeholders: " << s;
    }
    if (checkpointing_ != nullptr) {
      s = checkpointing_->SetMembership(placeholders_.world.get(), own_group());
      if (!s.ok()) {
        SL_LOG(WARNING) << "checkpoint save before the membership change: " << s;
      }
    }
    // Closing the sockets now makes peers blocked in a collective with this rank fail fast;
    // after a failure without a closing handshake, which would wait for peers busy elsewhere
    // (Gloo's closing barrier held a lost group's other rank, and so every survivor, 2 s).
    if (abandon) {
      for (fsdp::Communicator* c :
           {current_.world.get(), current_.shard.get(), current_.replicate.get()}) {
        if (c != nullptr) c->Abandon();
      }
    }
    current_ = fsdp::CommGroups();
    current_is_placeholder_ = true;
  }
}

bool ReplicaFaultTolerance::MarkBroken(const absl::Status& s) {
  if (!IsCommFailure(s)) return false;
  if (broken_.ok()) broken_ = s;
  TearDown(/*abandon=*/true);
  return true;
}

absl::Status ReplicaFaultTolerance::Rebuild(int64_t epoch, const std::vector<int>& live,
                                            bool abandon) {
  TearDown(abandon);
  if (epoch != epoch_) builds_in_epoch_ = 0;
  epoch_ = epoch;
  live_ = live;
  fsdp::CommOptions comm = options_.comm;
  comm.key_prefix = absl::StrCat(options_.comm.key_prefix, "/ft/e", epoch);
  if (builds_in_epoch_ > 0) absl::StrAppend(&comm.key_prefix, "/a", builds_in_epoch_);
  ++builds_in_epoch_;
  absl::StatusOr<fsdp::CommGroups> groups =
      fsdp::CreateMemberCommGroups(options_.layout, options_.rank, live, options_.store, comm);
  absl::Status s = groups.status();
  if (s.ok()) {
    s = backend_->SetCommunicators(
        {groups->world.get(), groups->shard.get(), groups->replicate.get()});
  }
  if (!s.ok()) {
    broken_ = s;
    return s;
  }
  current_ = *std::move(groups);
  current_is_placeholder_ = false;
  broken_ = absl::OkStatus();
  if (checkpointing_ != nullptr) {
    RETURN_IF_ERROR(checkpointing_->SetMembership(current_.world.get(), live.front()));
  }
  return absl::OkStatus();
}

absl::StatusOr<StepDecision> ReplicaFaultTolerance::EndStep(int64_t step,
                                                            const absl::Status& trained,
                                                            double loss, bool after_step_follows) {
  if (!trained.ok() && !MarkBroken(trained)) return trained;  // Not a communication failure.
  StepBallot ballot;
  ballot.step = step;
  ballot.loss = broken_.ok() ? loss : 0;
  ballot.digest = digest_;
  ballot.after_step_follows = after_step_follows;
  return Decide(std::move(ballot), absl::StrCat("step ", step));
}

absl::StatusOr<StepDecision> ReplicaFaultTolerance::EndAfterStep(int64_t step) {
  StepBallot ballot;
  ballot.step = step;
  ballot.phase = StepBallot::Phase::kAfterStep;
  return Decide(std::move(ballot), absl::StrCat("the work after step ", step));
}

absl::StatusOr<StepDecision> ReplicaFaultTolerance::Decide(StepBallot ballot,
                                                           const std::string& what) {
  ballot.epoch = epoch_;
  ballot.ok = broken_.ok();
  ballot.error = std::string(broken_.message());
  ASSIGN_OR_RETURN(StepDecision d, options_.voter->Vote(ballot));
  const bool train = ballot.phase == StepBallot::Phase::kTrain;
  switch (d.kind) {
    case StepDecision::Kind::kLeave:
      left_ = true;
      SL_LOG(WARNING) << "left the job: replica group " << own_group() << " was lost (" << what
                      << ")";
      TearDown(/*abandon=*/true);
      return d;
    case StepDecision::Kind::kAbort: {
      const std::string why =
          broken_.ok() ? std::string("another replica group failed") : std::string(ballot.error);
      SL_LOG(WARNING) << what << " aborted: " << why
                      << (train ? "; training it again" : "; doing it again")
                      << " with replica groups " << Groups(d.live_groups) << " (epoch " << d.epoch
                      << ")";
      if (checkpointing_ != nullptr) checkpointing_->NoteAbort(d.live_groups, ballot.step);
      absl::Status rebuilt = Rebuild(d.epoch, d.live_groups, /*abandon=*/true);
      if (!rebuilt.ok()) {
        SL_LOG(WARNING) << "building the communicators of epoch " << d.epoch << ": " << rebuilt
                        << "; voting not ok on " << what;
      }
      return d;
    }
    case StepDecision::Kind::kCommit:
      if (!broken_.ok()) {
        return absl::InternalError(absl::StrCat(
            what, " was committed although this rank voted not ok: ", broken_.message()));
      }
      if (d.epoch != epoch_) pending_ = d;
      return d;
  }
  return d;
}

absl::Status ReplicaFaultTolerance::Heal(const StepDecision& d, std::vector<int64_t>* progress) {
  int root = -1;
  for (size_t i = 0; i < d.live_groups.size(); ++i) {
    if (d.live_groups[i] == d.heal_source_group) root = static_cast<int>(i);
  }
  if (root < 0) {
    return absl::InternalError(absl::StrCat("heal source group ", d.heal_source_group,
                                            " is not among the live groups ",
                                            Groups(d.live_groups)));
  }
  // float16 loss scaling: the scaler's state travels with the progress (the replicas' scales
  // must agree, or their scaled gradients would not average).
  fsdp::DynamicLossScaler* scaler = backend_->scaler();
  const size_t n = progress->size();
  if (scaler != nullptr) {
    const fsdp::DynamicLossScaler::State st = scaler->state();
    int64_t bits = 0;
    static_assert(sizeof(bits) == sizeof(st.scale));
    std::memcpy(&bits, &st.scale, sizeof(bits));
    progress->insert(progress->end(), {bits, st.good_steps, st.skipped});
  }
  RETURN_IF_ERROR(fsdp::BroadcastReplicaState(*backend_->engine(), backend_->optimizer(),
                                              current_.replicate.get(), root, progress));
  if (scaler != nullptr) {
    fsdp::DynamicLossScaler::State st;
    std::memcpy(&st.scale, &(*progress)[n], sizeof(st.scale));
    st.good_steps = static_cast<int>((*progress)[n + 1]);
    st.skipped = (*progress)[n + 2];
    scaler->set_state(st);
    progress->resize(n);
  }
  return absl::OkStatus();
}

absl::Status ReplicaFaultTolerance::AfterCommit(int64_t step, int64_t data_epoch,
                                                int64_t data_position) {
  if (!pending_.has_value()) return absl::OkStatus();
  const StepDecision d = *std::move(pending_);
  pending_.reset();
  if (!Rebuild(d.epoch, d.live_groups).ok()) return absl::OkStatus();  // Votes not ok next.
  if (d.joining_groups.empty()) return absl::OkStatus();
  std::vector<int64_t> progress = {step, data_epoch, data_position};
  absl::Status healed = Heal(d, &progress);
  if (!healed.ok()) {
    MarkBroken(healed);
    return IsCommFailure(healed) ? absl::OkStatus() : healed;
  }
  if (leader()) {
    SL_LOG(INFO) << "healed replica group(s) " << Groups(d.joining_groups) << " from replica group "
                 << d.heal_source_group << " at step " << step << " (epoch " << d.epoch
                 << ", replica groups " << Groups(d.live_groups) << ")";
  }
  return absl::OkStatus();
}

absl::StatusOr<JoinPoint> ReplicaFaultTolerance::Join() {
  StepBallot ballot;
  ballot.joining = true;
  ballot.ok = true;
  while (true) {
    if (options_.should_stop && options_.should_stop()) {
      return absl::CancelledError("stopped by a signal while waiting to join");
    }
    ASSIGN_OR_RETURN(StepDecision d, options_.voter->Vote(ballot));
    if (d.kind == StepDecision::Kind::kLeave) {
      left_ = true;
      SL_LOG(WARNING) << "left the job: replica group " << own_group()
                      << " was lost before it rejoined";
      return absl::UnavailableError("told to leave while joining");
    }
    bool admitted = false;
    for (int g : d.joining_groups) admitted = admitted || g == own_group();
    if (d.kind != StepDecision::Kind::kCommit || !admitted) continue;  // Not yet: vote again.
    RETURN_IF_ERROR(Rebuild(d.epoch, d.live_groups));
    std::vector<int64_t> progress = {0, 0, 0};
    RETURN_IF_ERROR(Heal(d, &progress));
    SL_LOG(INFO) << "healed from replica group " << d.heal_source_group << " at step "
                 << progress[0] << " (epoch " << d.epoch << ", replica groups "
                 << Groups(d.live_groups) << ")";
    return JoinPoint{progress[0], progress[1], progress[2]};
  }
}

}  // namespace shardline::trainer
