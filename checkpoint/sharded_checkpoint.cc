#include "checkpoint/sharded_checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <system_error>
#include <thread>
#include <utility>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/manifest_io.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/safetensors_reader.h"
#include "checkpoint/shard_writer.h"
#include "common/status_macros.h"
#include "common/torch_status.h"
#include "common/write_beneath.h"

namespace shardline::checkpoint {
namespace {

// Runs `work` on `n` threads (this one included) and waits for all; `work` takes its items
// from a shared counter, so the threads share the items.
void RunOnThreads(int n, const std::function<void()>& work) {
  std::vector<std::thread> threads;
  for (int t = 1; t < std::max(1, n); ++t) threads.emplace_back(work);
  work();
  for (std::thread& t : threads) t.join();
}

// Runs fn(i) for i in [0, count) on `n` threads, each taking the next index; returns the first
// error in index order (not in time order), so the message does not depend on timing.
absl::Status ForEachIndexOnThreads(int n, size_t count,
                                   const std::function<absl::Status(size_t)>& fn) {
  std::vector<absl::Status> results(count);
  std::atomic<size_t> next{0};
  RunOnThreads(n, [&] {
    for (size_t i = next++; i < count; i = next++) results[i] = fn(i);
  });
  for (const absl::Status& r : results) RETURN_IF_ERROR(r);
  return absl::OkStatus();
}

// Why a checkpoint's model fingerprint differs from this engine's: the first tensor missing on
// either side or with another shape.
std::string DescribeModelDifference(const CheckpointMeta& meta, const fsdp::FsdpEngine& engine) {
  std::map<std::string, std::vector<int64_t>> theirs, ours;
  for (const TensorInfo& t : meta.tensors) {
    if (t.name.find('#') == std::string::npos) theirs[t.name] = t.shape;
  }
  for (const auto& f : engine.flat_params()) {
    for (const fsdp::FlatParamEntry& e : f->entries()) ours[e.name] = e.shape;
  }
  for (const auto& [name, shape] : ours) {
    auto it = theirs.find(name);
    if (it == theirs.end()) return absl::StrCat("tensor ", name, " is not in the checkpoint");
    if (it->second != shape) {
      return absl::StrCat("tensor ", name, " has another shape in the checkpoint");
    }
  }
  for (const auto& [name, shape] : theirs) {
    if (ours.count(name) == 0) {
      return absl::StrCat("tensor ", name, " of the checkpoint is not in this model");
    }
  }
  return "(names and shapes agree; the fingerprint differs)";
}

// Every non-empty local slice names a tensor of the checkpoint with the same global shape.
absl::Status CheckSlicesInManifest(const CheckpointReader& reader, const std::string& manifest,
                                   const std::vector<fsdp::ShardSlice>& slices) {
  for (const fsdp::ShardSlice& s : slices) {
    if (s.end <= s.start) continue;
    const int ti = reader.FindTensor(s.name);
    if (ti < 0) return absl::NotFoundError(absl::StrCat(manifest, " has no tensor ", s.name));
    if (reader.meta().tensors[ti].shape != s.global_shape) {
      return absl::FailedPreconditionError(
          absl::StrCat(manifest, ": tensor ", s.name, " has another shape"));
    }
  }
  return absl::OkStatus();
}

// Copies one slice's checked pieces out of the mapping, only through CopyMapped: a data file
// truncated since it was checked is DATA_LOSS naming it, not a SIGBUS (the model may be partly
// loaded then; the caller stops on the error). A GPU shard goes through a host buffer.
absl::Status CopySlice(const CheckpointReader& reader, const fsdp::ShardSlice& slice,
                       const std::vector<CheckpointReader::MappedPiece>& pieces) {
  absl::Status read;
  absl::Status torch = TorchCall("load checkpoint shards", [&] {
    at::NoGradGuard no_grad;
    for (const CheckpointReader::MappedPiece& p : pieces) {
      at::Tensor dst = slice.local.narrow(0, p.offset, p.count);
      if (dst.device().is_cpu() && dst.scalar_type() == at::kFloat && dst.is_contiguous()) {
        read = reader.CopyMapped(p, dst.data_ptr<float>());
        if (!read.ok()) return;
        continue;
      }
      constexpr int64_t kChunk = int64_t{1} << 20;
      at::Tensor host = at::empty({std::min(kChunk, p.count)}, at::kFloat);
      for (int64_t done = 0; done < p.count; done += kChunk) {
        CheckpointReader::MappedPiece part = p;
        part.src += done;
        part.count = std::min(kChunk, p.count - done);
        read = reader.CopyMapped(part, host.data_ptr<float>());
        if (!read.ok()) return;
        dst.narrow(0, done, part.count).copy_(host.narrow(0, 0, part.count));
      }
    }
  });
  return torch.ok() ? read : torch;
}

TrainingProgress ProgressFrom(const CheckpointMeta& meta) {
  TrainingProgress p;
  p.step = meta.step;
  p.data_epoch = meta.data_epoch;
  p.data_position = meta.data_position;
  p.rng_state = meta.rng_state;
  p.optimizer_step = meta.optimizer_step;
  return p;
}

// "<param>.exp_avg" (ShardedOptimizer::LocalState) -> "<param>#exp_avg" (manifest).
std::string StateManifestName(const std::string& local_name) {
  for (const char* suffix : {"exp_avg_sq", "exp_avg", "momentum_buffer"}) {
    const std::string dotted = absl::StrCat(".", suffix);
    if (absl::EndsWith(local_name, dotted)) {
      return absl::StrCat(local_name.substr(0, local_name.size() - dotted.size()), "#", suffix);
    }
  }
  return local_name;
}

std::string RngState() {
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  at::Tensor state = gen.get_state();
  return std::string(static_cast<const char*>(state.data_ptr()), state.nbytes());
}

void SetRngState(const std::string& bytes) {
  if (bytes.empty()) return;
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  at::Tensor state = at::empty({static_cast<int64_t>(bytes.size())}, at::kByte);
  std::memcpy(state.data_ptr(), bytes.data(), bytes.size());
  gen.set_state(state);
}

}  // namespace

struct Checkpointer::Slices {
  std::string step_dir;
  std::string save_id;
  bool writer = false;
  int shard_index = 0;
  int shard_count = 1;
  bool commit = false;  // Rank 0.
  CheckpointMeta meta;
  std::vector<at::Tensor> owned;  // Host tensors the SliceData point into.
  std::vector<SliceData> data;
};

Checkpointer::Checkpointer(const Options& options, fsdp::FsdpEngine* engine,
                           fsdp::ShardedOptimizer* optimizer, fsdp::Communicator* world)
    : options_(options), engine_(engine), optimizer_(optimizer), world_(world) {
  std::vector<TensorInfo> params;
  for (const auto& f : engine_->flat_params()) {
    for (const fsdp::FlatParamEntry& e : f->entries()) params.push_back({e.name, e.shape});
  }
  fingerprint_ = ModelFingerprint(std::move(params));
  aliases_ = engine_->aliases();
}

absl::StatusOr<std::unique_ptr<Checkpointer>> Checkpointer::Create(
    const Options& options, fsdp::FsdpEngine* engine, fsdp::ShardedOptimizer* optimizer,
    fsdp::Communicator* world) {
  if (options.root.empty()) return absl::InvalidArgumentError("checkpoint root is empty");
  if (engine == nullptr || world == nullptr) {
    return absl::InvalidArgumentError("Checkpointer needs an engine and a world communicator");
  }
  return std::unique_ptr<Checkpointer>(new Checkpointer(options, engine, optimizer, world));
}

Checkpointer::~Checkpointer() {
  cancel_.store(true);
  (void)WaitForPendingSave();
  commit_reporter_.reset();  // Abandons a report still retrying (WaitForCommitReports first).
}

std::vector<fsdp::ShardSlice> Checkpointer::LocalSlices() const {
  std::vector<fsdp::ShardSlice> out = engine_->LocalParamState();
  if (optimizer_ != nullptr) {
    for (fsdp::ShardSlice s : optimizer_->LocalState()) {
      s.name = StateManifestName(s.name);
      out.push_back(std::move(s));
    }
  }
  return out;
}

absl::Status Checkpointer::SetMembership(fsdp::Communicator* world, int writer_group) {
  absl::Status pending = WaitForPendingSave();
  world_ = world;
  writer_group_ = writer_group;
  return pending;
}

absl::Status Checkpointer::WaitForPendingSave() {
  if (save_thread_.joinable()) save_thread_.join();
  absl::MutexLock lock(&mu_);
  absl::Status s = save_status_;
  save_status_ = absl::OkStatus();
  return s;
}

absl::Status Checkpointer::WaitForCommitReports() {
  if (commit_reporter_ == nullptr) return absl::OkStatus();
  return commit_reporter_->WaitIdle();
}

// The bytes of `files` in `step_dir` (for the coordinator's record: `shardctl checkpoints`, the
// dashboard); 0 when one cannot be sized (the size is informational, the commit stands).
static int64_t StepSizeBytes(const std::string& step_dir, const std::vector<std::string>& files) {
  int64_t total = 0;
  for (const std::string& f : files) {
    std::error_code ec;
    const std::uintmax_t n = std::filesystem::file_size(step_dir + "/" + f, ec);
    if (ec) return 0;
    total += static_cast<int64_t>(n);
  }
  return total;
}

absl::Status Checkpointer::WriteAndCommit(const Slices& sl) {
  if (sl.writer) {
    if (options_.test_after_data_file) options_.test_after_data_file(sl.shard_index);
    ASSIGN_OR_RETURN(ShardWriteResult w,
                     WriteShard(sl.step_dir, sl.shard_index, sl.save_id, sl.data));
    if (options_.on_saved) {
      SaveEvent e;
      e.step = sl.meta.step;
      e.step_dir = sl.step_dir;
      e.files = {w.data_file};
      e.expected_files = sl.shard_count;
      options_.on_saved(e);
    }
  }
  if (sl.commit) {
    RETURN_IF_ERROR(CommitCheckpoint(sl.step_dir, sl.shard_count, sl.save_id, sl.meta,
                                     options_.commit_timeout, &cancel_));
    SaveEvent e;
    e.step = sl.meta.step;
    e.step_dir = sl.step_dir;
    e.files = {kManifestFile};
    // Every data file: the commit report alone commits the step in the coordinator's registry,
    // whether or not the writers' own (best-effort) reports got through.
    for (int i = 0; i < sl.shard_count; ++i) e.files.push_back(DataFileName(i));
    e.size_bytes = StepSizeBytes(sl.step_dir, e.files);
    e.manifest_committed = true;
    e.expected_files = sl.shard_count;
    if (commit_reporter_ != nullptr) {
      // Report (retried until acknowledged), then retention, on the reporter's thread.
      commit_reporter_->Committed(e);
      return absl::OkStatus();
    }
    ASSIGN_OR_RETURN(std::vector<int64_t> deleted,
                     ApplyRetention(options_.root, options_.keep_last));
    (void)deleted;
    if (options_.on_saved) options_.on_saved(e);
  }
  return absl::OkStatus();
}

static absl::Status CheckJobOwner(const std::string& manifest, const std::string& theirs,
                                  const std::string& ours, const char* action) {
  if (ours.empty() || theirs == ours) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat(manifest, " belongs to job ", theirs.empty() ? "(none recorded)" : theirs,
                   ", not to job ", ours, ": refusing to ", action, " another job's checkpoint"));
}

absl::Status Checkpointer::CheckRootOwner() const {
  ASSIGN_OR_RETURN(const std::vector<int64_t> steps, ListCommittedSteps(options_.root));
  for (int64_t step : steps) {
    const std::string manifest = absl::StrCat(StepDir(options_.root, step), "/", kManifestFile);
    ASSIGN_OR_RETURN(const CheckpointManifest m, ReadManifestFile(manifest));
    RETURN_IF_ERROR(
        CheckJobOwner(manifest, m.job_id(), options_.job_id, "overwrite or delete (retention)"));
  }
  return absl::OkStatus();
}

absl::Status Checkpointer::Save(const TrainingProgress& progress, bool async) {
  RETURN_IF_ERROR(WaitForPendingSave());
  const fsdp::ParallelLayout& layout = engine_->layout();
  const int rank = engine_->rank();
  // Global rank 0, or with SetMembership the first rank of the writer group.
  const bool committer =
      layout.ReplicateIndex(rank) == writer_group_ && layout.ShardIndex(rank) == 0;
  ASSIGN_OR_RETURN(const uint64_t save_id, AgreeSaveId(progress.step, committer));
  std::shared_ptr<Slices> sl = NewSlices(progress, save_id, committer);
  if (sl->commit && options_.report_commit && commit_reporter_ == nullptr) {
    CommitReporter::Options ro;
    ro.root = options_.root;
    ro.keep_last = options_.keep_last;
    ro.report = options_.report_commit;
    ro.backoff = options_.report_backoff;
    commit_reporter_ = std::make_unique<CommitReporter>(ro);
  }
  if (sl->writer) RETURN_IF_ERROR(CopyShardsToHost(async, sl.get()));
  if (async) {
    save_thread_ = std::thread([this, sl] {
      absl::Status s = WriteAndCommit(*sl);
      absl::MutexLock lock(&mu_);
      save_status_ = s;
    });
    return absl::OkStatus();
  }
  return AgreeSaveResult(*sl, WriteAndCommit(*sl));
}

absl::Status Checkpointer::UncommitForSave(int64_t step) {
  // A root holding another job's committed checkpoints is never written to (its steps would be
  // un-committed, overwritten and deleted by retention). Checked once: only this job writes
  // here afterwards.
  if (!root_checked_ && !options_.job_id.empty()) {
    RETURN_IF_ERROR(CheckRootOwner());
    root_checked_ = true;
  }
  const std::string manifest = absl::StrCat(StepDir(options_.root, step), "/", kManifestFile);
  if (absl::Status s = UnlinkBeneath(manifest); !s.ok()) {
    return absl::IsNotFound(s) ? absl::OkStatus() : s;  // not committed: nothing to undo
  }
  return FsyncDir(StepDir(options_.root, step));
}

absl::StatusOr<uint64_t> Checkpointer::AgreeSaveId(int64_t step, bool committer) {
  // Saving a step that is already committed (a run resumed from an older checkpoint reaches it
  // again): rank 0 un-commits it first, before the all-reduce below lets any writer replace its
  // data files, so the directory is never a committed checkpoint with half-replaced data.
  const absl::Status uncommit = committer ? UncommitForSave(step) : absl::OkStatus();
  // A save id from rank 0 (sum of rank 0's value and zeros), so the committing rank never
  // merges leftovers of an interrupted save of the same step.
  at::Tensor id = at::zeros({1}, at::kLong);
  if (committer) {
    std::random_device rd;
    // Negative (never a real id): rank 0 refused the save; every rank returns an error.
    id.fill_(uncommit.ok() ? static_cast<int64_t>(((uint64_t{rd()} << 32) | rd()) >> 2) : -1);
  }
  // The communicator's device (the shards may be offloaded to the host).
  at::Tensor id_dev = id.to(engine_->device());
  RETURN_IF_ERROR(world_->AllReduce(id_dev, fsdp::ReduceOp::kSum));
  id = id_dev.cpu();
  RETURN_IF_ERROR(uncommit);
  if (id.item<int64_t>() < 0) {
    return absl::AbortedError(
        absl::StrCat("checkpoint ", StepDir(options_.root, step), ": rank 0 refused the save"));
  }
  return static_cast<uint64_t>(id.item<int64_t>());
}

std::shared_ptr<Checkpointer::Slices> Checkpointer::NewSlices(const TrainingProgress& progress,
                                                              uint64_t save_id,
                                                              bool committer) const {
  const fsdp::ParallelLayout& layout = engine_->layout();
  const int rank = engine_->rank();
  auto sl = std::make_shared<Slices>();
  sl->step_dir = StepDir(options_.root, progress.step);
  sl->save_id = absl::StrFormat("%016x", save_id);
  sl->writer = layout.ReplicateIndex(rank) == writer_group_;
  sl->shard_index = layout.ShardIndex(rank);
  sl->shard_count = layout.shard_degree();
  sl->commit = committer;
  CheckpointMeta& m = sl->meta;
  m.step = progress.step;
  m.model_fingerprint = fingerprint_;
  m.world_size = layout.world_size();
  m.strategy = layout.StrategyName();
  m.shard_degree = layout.shard_degree();
  m.data_epoch = progress.data_epoch;
  m.data_position = progress.data_position;
  m.rng_state = progress.rng_state.empty() ? RngState() : progress.rng_state;
  m.optimizer = optimizer_ != nullptr ? options_.optimizer_kind : "";
  m.optimizer_step = optimizer_ != nullptr ? optimizer_->step_count() : 0;
  m.job_id = options_.job_id;
  m.attempt = options_.attempt;
  m.aliases = aliases_;
  return sl;
}

absl::Status Checkpointer::CopyShardsToHost(bool async, Slices* sl) const {
  return TorchCall("copy checkpoint shards to host", [&] {
    at::NoGradGuard no_grad;
    for (const fsdp::ShardSlice& s : LocalSlices()) {
      if (s.end <= s.start) continue;
      at::Tensor host = s.local.detach().to(at::kCPU).contiguous();
      // Asynchronous saves need a private copy: training updates the shards in place.
      if (async && host.data_ptr() == s.local.data_ptr()) host = host.clone();
      sl->data.push_back(SliceData{s.name, s.global_shape, s.start, s.end, host.data_ptr<float>()});
      sl->owned.push_back(std::move(host));
    }
  });
}

absl::Status Checkpointer::AgreeSaveResult(const Slices& sl, const absl::Status& own) {
  // Every rank returns after the commit, and with an error if any rank failed.
  at::Tensor failed = at::full({1}, own.ok() ? 0.0 : 1.0, at::kDouble).to(engine_->device());
  absl::Status agree = world_->AllReduce(failed, fsdp::ReduceOp::kSum);
  if (!own.ok()) return own;  // Our own error says more than a lost peer.
  RETURN_IF_ERROR(agree);
  const double n = failed.cpu().item<double>();
  if (n > 0) {
    return absl::AbortedError(
        absl::StrCat("checkpoint ", sl.step_dir, ": the save failed on ", n, " other rank(s)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<TrainingProgress> Checkpointer::Load(int64_t step) {
  RETURN_IF_ERROR(WaitForPendingSave());
  // The communicator's device (the shards may be offloaded to the host).
  const at::Device device = engine_->device();
  std::vector<fsdp::ShardSlice> slices = LocalSlices();
  // Where each slice's elements are in the mapped, checked data files: nothing is copied into
  // the model until every rank has checked all of its slices.
  std::vector<std::vector<CheckpointReader::MappedPiece>> staged(slices.size());
  std::unique_ptr<CheckpointReader> reader;

  // Everything that can fail happens here, before any rank touches its model.
  auto stage = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(reader, CheckpointReader::Open(options_.root, step));
    const CheckpointMeta& meta = reader->meta();
    const std::string manifest = absl::StrCat(reader->dir(), "/", kManifestFile);
    RETURN_IF_ERROR(CheckJobOwner(manifest, meta.job_id, options_.job_id, "resume from"));
    if (meta.model_fingerprint != fingerprint_) {
      return absl::FailedPreconditionError(absl::StrCat(
          manifest, " is for another model (fingerprint ", meta.model_fingerprint, ", this model ",
          fingerprint_, "): ", DescribeModelDifference(meta, *engine_)));
    }
    if (optimizer_ != nullptr && meta.optimizer != options_.optimizer_kind) {
      return absl::FailedPreconditionError(absl::StrCat(manifest, " holds optimizer state for '",
                                                        meta.optimizer, "', this run uses '",
                                                        options_.optimizer_kind, "'"));
    }
    RETURN_IF_ERROR(reader->VerifyFiles());
    RETURN_IF_ERROR(CheckSlicesInManifest(*reader, manifest, slices));
    // Maps and checksums each slice's pieces, on the loading threads.
    return ForEachIndexOnThreads(options_.load_threads, slices.size(), [&](size_t i) {
      const fsdp::ShardSlice& s = slices[i];
      if (s.end <= s.start) return absl::OkStatus();
      ASSIGN_OR_RETURN(staged[i], reader->MapElements(s.name, s.start, s.end));
      return absl::OkStatus();
    });
  };
  absl::Status local = stage();

  at::Tensor failed = at::full({1}, local.ok() ? 0.0 : 1.0, at::kDouble).to(device);
  absl::Status agree = world_->AllReduce(failed, fsdp::ReduceOp::kSum);
  if (!local.ok()) return local;
  RETURN_IF_ERROR(agree);
  const double n = failed.cpu().item<double>();
  if (n > 0) {
    return absl::AbortedError(absl::StrCat("checkpoint ", reader->dir(), " failed verification on ",
                                           n, " other rank(s); nothing was loaded"));
  }

  // Copied on the loading threads too (slices are disjoint views), one slice at a time each.
  RETURN_IF_ERROR(ForEachIndexOnThreads(options_.load_threads, slices.size(), [&](size_t i) {
    return CopySlice(*reader, slices[i], staged[i]);
  }));
  const CheckpointMeta& meta = reader->meta();
  if (optimizer_ != nullptr) optimizer_->set_step_count(meta.optimizer_step);
  SetRngState(meta.rng_state);
  return ProgressFrom(meta);
}

absl::Status LoadSafetensorsIntoEngine(const std::string& path, fsdp::FsdpEngine* engine) {
  // Only the header first: every parameter is looked up and checked before any tensor is read,
  // and then each is read (pread) straight into a tensor of its dtype: the file is never held
  // whole, and a hostile header is refused by the reader before LibTorch sees a shape.
  ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsReader> reader, SafetensorsReader::Open(path));
  // Canonical parameter name -> its tensor in the file and that tensor's dtype.
  std::map<std::string, std::pair<const SafetensorsEntry*, at::ScalarType>> wanted;
  for (const auto& f : engine->flat_params()) {
    for (const fsdp::FlatParamEntry& e : f->entries()) {
      const SafetensorsEntry* t = nullptr;
      std::optional<at::ScalarType> type;
      // The first of the name and its aliases that the file holds in a dtype we convert.
      for (size_t a = 0; !type.has_value() && a <= e.aliases.size(); ++a) {
        t = reader->Find(a == 0 ? e.name : e.aliases[a - 1]);
        if (t == nullptr) continue;
        if (t->dtype == "F32") {
          type = at::kFloat;
        } else if (t->dtype == "F16") {
          type = at::kHalf;
        } else if (t->dtype == "BF16") {
          type = at::kBFloat16;
        }
      }
      if (!type.has_value()) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": parameter ", e.name, " is missing (or not F32/F16/BF16)"));
      }
      if (t->shape != e.shape) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": parameter ", e.name, " has another shape than the model's"));
      }
      wanted.emplace(e.name, std::make_pair(t, *type));
    }
  }
  // Then only this rank's range of each parameter, one range at a time, straight into the
  // shard (converted to float32 there): a rank never holds a whole tensor of the file.
  engine->ReshardAll();  // Gathered copies would be stale.
  for (const fsdp::ShardSlice& slice : engine->LocalParamState()) {
    const auto& [t, type] = wanted.at(slice.name);
    const int64_t count = slice.end - slice.start;
    if (count == 0) continue;
    at::Tensor raw;
    RETURN_IF_ERROR(TorchCall("allocate a safetensors range",
                              [&, type = type] { raw = at::empty({count}, type); }));
    RETURN_IF_ERROR(reader->ReadElements(*t, slice.start, count, raw.data_ptr()));
    RETURN_IF_ERROR(TorchCall("convert a safetensors range to float32", [&] {
      at::NoGradGuard no_grad;
      slice.local.copy_(raw);
    }));
  }
  return absl::OkStatus();
}

}  // namespace shardline::checkpoint
