#include "trainer/train_loop.h"

#include <chrono>
#include <cmath>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/torch_status.h"
#include "data/batch.h"
#include "data/byte_tokenizer.h"
#include "models/sample.h"
#include "trainer/lr_schedule.h"

namespace shardline::trainer {
namespace {

using Clock = std::chrono::steady_clock;

// Mean over all ranks of per-rank (sum, count) pairs. `sum` is a float64 scalar, on the model's
// device in training (so that nothing is read back per micro-batch); the result comes to the host
// in one read. With `preempt`: in, whether this rank was asked to stop for a preemption; out,
// whether any rank was. The flag rides in the same all-reduce (a third element, which leaves the
// sums as they were), so the ranks agree on the step without a collective of its own.
absl::StatusOr<double> GlobalMean(TrainingBackend& backend, const at::Tensor& sum, double count,
                                  bool* preempt = nullptr) {
  std::vector<at::Tensor> parts = {sum.reshape({}), at::full({}, count, sum.options())};
  if (preempt != nullptr) parts.push_back(at::full({}, *preempt ? 1.0 : 0.0, sum.options()));
  at::Tensor t = at::stack(parts);
  RETURN_IF_ERROR(backend.AllReduceSum(t));
  const at::Tensor host = t.cpu();
  if (preempt != nullptr) *preempt = host[2].item<double>() > 0;
  return host[0].item<double>() / host[1].item<double>();
}

class Loop {
 public:
  Loop(const TrainerConfig& c, models::LanguageModel& model, TrainingBackend& backend,
       const data::TokenDataset& dataset, const TrainLoopOptions& o, data::DistributedSampler s)
      : c_(c), model_(model), backend_(backend), data_(dataset), o_(o), sampler_(std::move(s)) {}

  absl::StatusOr<TrainSummary> Run() {
    device_ = model_.module().parameters().front().device();
    RETURN_IF_ERROR(sampler_.Restore(
        o_.start_cursor_from_step ? sampler_.CursorAfterSteps(o_.start_step) : o_.start_cursor));
    at::manual_seed(c_.seed + 1000003ULL * o_.rank);  // Dropout: per rank, reproducible.
    flops_per_token_ = model_.TrainingFlopsPerToken(c_.seq_len);
    tokens_per_step_ = static_cast<int64_t>(c_.global_batch_size) * c_.seq_len;
    TrainSummary summary;
    leading_ = Leader();
    model_.module().train();
    for (int64_t step = o_.start_step; step < c_.steps; ++step) {
      if (o_.should_stop && o_.should_stop()) {
        return absl::CancelledError(absl::StrCat("stopped by a signal after step ", step));
      }
      backend_.set_step(step + 1);
      const auto t0 = Clock::now();
      const double lr =
          LearningRateAt(static_cast<int>(step), c_.lr, c_.min_lr, c_.warmup_steps, c_.steps);
      if (o_.gate != nullptr) {
        ASSIGN_OR_RETURN(double loss, VotedStep(step));
        ASSIGN_OR_RETURN(double grad_norm, backend_.Step(lr));
        const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
        RETURN_IF_ERROR(FinishStep(step, lr, grad_norm, loss, seconds, summary));
        const data::DataCursor& next = sampler_.cursor();
        RETURN_IF_ERROR(o_.gate->AfterCommit(step + 1, next.epoch, next.position));
        continue;
      }
      ASSIGN_OR_RETURN(at::Tensor local_loss, TrainStep());
      ASSIGN_OR_RETURN(double grad_norm, backend_.Step(lr));
      bool preempt = o_.preempt_requested && o_.preempt_requested();
      ASSIGN_OR_RETURN(double loss, GlobalMean(backend_, local_loss, 1.0,
                                               o_.preempt_requested ? &preempt : nullptr));
      // The last step needs no preemption: the job ends anyway.
      preempt = preempt && !LastStep(step);
      if (preempt) o_.on_preempt(step + 1);  // Before the work after the update: it saves.
      const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
      RETURN_IF_ERROR(FinishStep(step, lr, grad_norm, loss, seconds, summary));
      if (preempt) {
        summary.steps = step + 1;
        summary.cursor = sampler_.cursor();
        summary.preempted_after_step = step + 1;
        return summary;
      }
    }
    summary.steps = c_.steps;
    summary.cursor = sampler_.cursor();
    return summary;
  }

 private:
  // What the work after a step's update produced.
  struct AfterStepResults {
    std::optional<double> val_loss;
    std::optional<std::string> sample;
  };

  // After the optimizer step: the divergence check, the work after the update (evaluation, the
  // final sample, a checkpoint save; voted on with a gate), then the logs.
  absl::Status FinishStep(int64_t step, double lr, double grad_norm, double loss, double seconds,
                          TrainSummary& summary) {
    if (!std::isfinite(loss)) {
      return absl::AbortedError(absl::StrCat(
          "training loss became ", loss, " at step ", step + 1,
          "; lower optimizer.lr, raise optimizer.warmup_steps or set optimizer.grad_clip"));
    }
    summary.train_losses.push_back(loss);
    RETURN_IF_ERROR(TakeOverLogging());  // Before the step's own work: it may log nothing.
    AfterStepResults after;
    if (o_.gate != nullptr && HasAfterStepWork(step)) {
      ASSIGN_OR_RETURN(after, VotedAfterStepWork(step));
    } else {
      ASSIGN_OR_RETURN(after, AfterStepWork(step));
    }
    if (after.val_loss.has_value()) {
      summary.val_losses.emplace_back(step + 1, *after.val_loss);
      summary.final_val_loss = *after.val_loss;
    }
    if (after.sample.has_value()) summary.sample = *after.sample;
    // A step logged only for its evaluation logs nothing when the evaluation gave no loss (it
    // may not under replica-group fault tolerance).
    const bool for_eval_only = !LastStep(step) && (step + 1) % c_.log_every != 0;
    if (!StepIsLogged(c_, step + 1) || (for_eval_only && !after.val_loss.has_value())) {
      return absl::OkStatus();
    }
    StepMetrics m;
    m.step = step + 1;
    m.loss = loss;
    m.lr = lr;
    m.grad_norm = grad_norm;
    m.step_time_s = seconds;
    m.tokens_per_s = tokens_per_step_ / seconds;
    m.mfu =
        flops_per_token_ * tokens_per_step_ / seconds / (o_.peak_flops_per_rank * o_.world_size);
    m.rss_bytes = CurrentRssBytes();
    m.peak_memory_bytes = PeakRssBytes();
    FillDeviceMemory(device_, &m);
    m.val_loss = after.val_loss;
    m.loss_scale = backend_.loss_scale();
    m.skipped_steps = backend_.skipped_steps();
    m.rank = o_.rank;
    m.world_size = o_.world_size;
    if (after.sample.has_value() && Leader()) m.sample = *after.sample;
    return Emit(m);
  }

  // Step `step` (0-based) is the job's last.
  bool LastStep(int64_t step) const { return step + 1 == c_.steps; }
  bool EvaluatesAfter(int64_t step) const {
    return LastStep(step) || (c_.eval_every > 0 && (step + 1) % c_.eval_every == 0);
  }
  bool SamplesAfter(int64_t step) const { return LastStep(step) && c_.sample_tokens > 0; }
  bool SavesAfter(int64_t step) const {
    if (!o_.after_step) return false;
    return !o_.saves_after_step || o_.saves_after_step(step + 1);
  }
  // Whether step `step` (0-based) has work after its update that uses collectives.
  bool HasAfterStepWork(int64_t step) const {
    return EvaluatesAfter(step) || SamplesAfter(step) || SavesAfter(step);
  }

  // Evaluation, the final sample and a checkpoint save after step `step`'s update (each when it
  // is due). With a gate, a communication failure breaks it and skips the rest (the vote on
  // this work then aborts it); without one it is returned.
  absl::StatusOr<AfterStepResults> AfterStepWork(int64_t step) {
    AfterStepResults r;
    if (EvaluatesAfter(step) && !Broken()) {
      absl::StatusOr<double> v = Evaluate();
      if (!v.ok() && !MarkBroken(v.status())) return v.status();
      if (v.ok()) r.val_loss = *v;
      model_.module().train();
    }
    if (SamplesAfter(step) && !Broken()) {
      absl::StatusOr<std::string> sample = Sample();
      if (!sample.ok() && !MarkBroken(sample.status())) return sample.status();
      if (sample.ok()) r.sample = *std::move(sample);
    }
    if (o_.after_step && !Broken()) {
      absl::Status saved = o_.after_step(step + 1, sampler_.cursor());
      if (!saved.ok() && !MarkBroken(saved)) return saved;
    }
    return r;
  }

  // Replica-group fault tolerance: the work after step `step`'s update, until a vote commits
  // it. ABORT: the gate rebuilt the communicators over the live groups; the same work again
  // (the model is the committed one: the update is not redone).
  absl::StatusOr<AfterStepResults> VotedAfterStepWork(int64_t step) {
    while (true) {
      ASSIGN_OR_RETURN(AfterStepResults r, AfterStepWork(step));
      ASSIGN_OR_RETURN(StepDecision d, o_.gate->EndAfterStep(step + 1));
      if (d.kind == StepDecision::Kind::kCommit) return r;
      if (d.kind == StepDecision::Kind::kLeave) {
        return absl::UnavailableError(absl::StrCat("left the job after step ", step + 1,
                                                   ": this rank's replica group was lost"));
      }
    }
  }

  // Replica-group fault tolerance: trains step `step` (0-based) until a vote commits it, and
  // returns the committed loss. ABORT rewinds the sampler to the step's start and trains again.
  absl::StatusOr<double> VotedStep(int64_t step) {
    const data::DataCursor start = sampler_.cursor();
    while (true) {
      o_.gate->BeginStep(step + 1);
      backend_.set_step(step + 1);  // The communicators may be new since the last try (ABORT).
      absl::Status trained = o_.gate->broken();
      double local = 0;
      if (trained.ok()) {
        absl::StatusOr<at::Tensor> l = TrainStep();
        trained = l.status();
        if (trained.ok()) {
          trained = TorchCall("read the loss", [&] { local = l->cpu().item<double>(); });
        }
        // CUDA: the read waited for the step's gradient reductions (Backward returned with the
        // last ones still running) or for their watchdog's abort; an aborted one left the
        // gradients undefined, and the vote must not commit them.
        if (trained.ok()) trained = backend_.CommunicationError();
      }
      ASSIGN_OR_RETURN(StepDecision d,
                       o_.gate->EndStep(step + 1, trained, local, HasAfterStepWork(step)));
      if (d.kind == StepDecision::Kind::kCommit) return d.loss;
      if (d.kind == StepDecision::Kind::kLeave) {
        return absl::UnavailableError(absl::StrCat("left the job at step ", step + 1,
                                                   ": this rank's replica group was lost"));
      }
      RETURN_IF_ERROR(sampler_.Restore(start));  // ABORT: the same data again.
    }
  }

  // Whether this rank logs the job's lines (rank 0; with a gate, its leader).
  bool Leader() const { return o_.gate != nullptr ? o_.gate->leader() : o_.rank == 0; }
  // With a gate: its communicators failed since they were built (never without one).
  bool Broken() const { return o_.gate != nullptr && !o_.gate->broken().ok(); }
  // With a gate, a communication failure `s` in the work after a step's update breaks it
  // (true); false: the caller fails with `s` (always without a gate).
  bool MarkBroken(const absl::Status& s) {
    if (o_.gate == nullptr || !o_.gate->MarkBroken(s)) return false;
    SL_LOG(WARNING) << "a collective failed after the step's update: " << s.message()
                    << "; the rest of that work is skipped, voted not ok and done again";
    return true;
  }

  // Forward + backward of this rank's micro-batches; returns their mean loss as a float64 scalar
  // on the model's device. The losses add up there: a host read (item()) per micro-batch would
  // wait for the device each time; the step reads the mean once, in GlobalMean. (The same float64
  // additions as a host accumulator: the same value.)
  absl::StatusOr<at::Tensor> TrainStep() {
    const std::vector<std::vector<int64_t>> micro = sampler_.Next();
    const int a = static_cast<int>(micro.size());
    at::Tensor loss_sum;
    for (int m = 0; m < a; ++m) {
      ASSIGN_OR_RETURN(data::Batch batch, data::ReadBatch(data_, data::Split::kTrain, micro[m]));
      RETURN_IF_ERROR(backend_.BeginForward());
      ASSIGN_OR_RETURN(at::Tensor loss, TorchTry("forward", [&] { return Loss(batch); }));
      RETURN_IF_ERROR(backend_.Backward(loss / a, /*sync=*/m == a - 1));
      const at::Tensor l = loss.detach().to(at::kDouble);
      loss_sum = m == 0 ? l : loss_sum + l;
    }
    return loss_sum / a;
  }

  at::Tensor Loss(const data::Batch& batch) {
    // [B, T, V]; in float32 for the loss even when the model computes in bf16/fp16 (mixed
    // precision), as autocast does: the softmax over the vocabulary needs the range.
    at::Tensor logits = model_.Forward(batch.inputs.to(device_)).to(at::kFloat);
    return at::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}),
                                  batch.targets.to(device_).reshape({-1}));
  }

  absl::StatusOr<double> Evaluate() {
    model_.module().eval();
    torch::NoGradGuard no_grad;
    const int64_t n_val = data_.num_samples(data::Split::kVal);
    const data::Split split = n_val > 0 ? data::Split::kVal : data::Split::kTrain;
    const int64_t n = n_val > 0 ? n_val : data_.num_samples(data::Split::kTrain);
    double sum = 0;
    for (int b = 0; b < c_.eval_batches; ++b) {
      ASSIGN_OR_RETURN(data::Batch batch,
                       data::ReadBatch(data_, split,
                                       data::ValidationIndices(b, c_.micro_batch_size,
                                                               o_.world_size, o_.rank, n)));
      RETURN_IF_ERROR(backend_.BeginForward());
      ASSIGN_OR_RETURN(at::Tensor loss,
                       TorchTry("validation forward", [&] { return Loss(batch); }));
      backend_.EndForward();
      sum += loss.item<double>();
    }
    return GlobalMean(backend_, at::scalar_tensor(sum, at::kDouble), c_.eval_batches);
  }

  absl::StatusOr<std::string> Sample() {
    const bool text = c_.data_format == data::TokenFormat::kText;
    std::vector<int64_t> prompt;
    if (o_.vocab != nullptr && !c_.sample_prompt.empty()) {
      ASSIGN_OR_RETURN(prompt, o_.vocab->Encode(c_.sample_prompt));
    } else if (text) {
      prompt = data::ByteTokenizer().Encode(c_.sample_prompt.empty() ? "\n" : c_.sample_prompt);
    } else {
      std::vector<int64_t> first(data_.seq_len() + 1);
      RETURN_IF_ERROR(data_.Read(data::Split::kTrain, 0, first.data()));
      prompt.assign(first.begin(), first.begin() + 1);
    }
    if (o_.before_sample) o_.before_sample();
    models::SampleOptions opts;
    opts.num_tokens = c_.sample_tokens;
    opts.seed = c_.seed;
    // Generate's TorchTry returns a failed collective's own status (common/torch_status.h).
    opts.forward = [&](const at::Tensor& ids) {
      ThrowIfError(backend_.BeginForward());
      at::Tensor logits = model_.Forward(ids).to(at::kFloat);  // Sampling expects float32.
      backend_.EndForward();
      return logits;
    };
    ASSIGN_OR_RETURN(std::vector<int64_t> ids, models::Generate(model_, prompt, opts, device_));
    if (text || o_.vocab != nullptr) {
      std::vector<int64_t> all = prompt;
      all.insert(all.end(), ids.begin(), ids.end());
      return o_.vocab != nullptr ? o_.vocab->DecodeForDisplay(all)
                                 : data::ByteTokenizer().DecodeForDisplay(all);
    }
    return absl::StrJoin(ids, " ");
  }

  // A rank that has just become the leader (the lowest live replica group was lost) logs the
  // last logged step again: the old leader may have been lost between that step's commit and
  // its log line, and no later vote waited for it (found by a cold suite run, #30: the loss
  // series in TensorBoard missed a step). Earlier logged steps were logged: the old leader
  // logs a step before it votes on the next one. So a handover logs at most one step twice,
  // with the same values (the committed loss; the grad norm of identical gradients).
  absl::Status TakeOverLogging() {
    const bool leader = Leader();
    const bool took_over = leader && !leading_;
    leading_ = leader;
    if (!took_over || !last_logged_.has_value()) return absl::OkStatus();
    SL_LOG(INFO) << "leading the job now: step " << last_logged_->step
                 << " logged again (the previous leader may have been lost before logging it)";
    return LeaderOutputs(*last_logged_);
  }

  absl::Status Emit(const StepMetrics& m) {
    RETURN_IF_ERROR(TakeOverLogging());
    last_logged_ = m;
    if (Leader()) RETURN_IF_ERROR(LeaderOutputs(m));
    if (o_.on_log) o_.on_log(m);
    if (o_.metrics != nullptr) return o_.metrics->Write(m);
    return absl::OkStatus();
  }

  // The leader's outputs of a logged step: its line and its TensorBoard scalars.
  absl::Status LeaderOutputs(const StepMetrics& m) {
    std::string line = absl::StrFormat(
        "step %d/%d loss %.4f lr %.3g grad_norm %.3f %.3fs %.0f tok/s mfu %.2f%% rss %.0fMiB",
        m.step, c_.steps, m.loss, m.lr, m.grad_norm, m.step_time_s, m.tokens_per_s, 100 * m.mfu,
        m.rss_bytes / 1048576.0);
    if (m.val_loss.has_value()) absl::StrAppendFormat(&line, " val_loss %.4f", *m.val_loss);
    SL_LOG(INFO) << line;
    TensorBoardWriter* tensorboard = o_.tensorboard;
    if (tensorboard == nullptr && !o_.tensorboard_dir.empty()) {
      if (own_tensorboard_ == nullptr) {
        ASSIGN_OR_RETURN(own_tensorboard_, TensorBoardWriter::Open(o_.tensorboard_dir));
        SL_LOG(INFO) << "leading the job: TensorBoard events go to " << own_tensorboard_->path();
      }
      tensorboard = own_tensorboard_.get();
    }
    if (tensorboard == nullptr) return absl::OkStatus();
    std::vector<std::pair<std::string, double>> scalars = {{"loss", m.loss},
                                                           {"lr", m.lr},
                                                           {"grad_norm", m.grad_norm},
                                                           {"tokens_per_s", m.tokens_per_s}};
    if (m.val_loss.has_value()) scalars.emplace_back("val_loss", *m.val_loss);
    const double now =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    return tensorboard->WriteScalars(m.step, now, scalars);
  }

  const TrainerConfig& c_;
  models::LanguageModel& model_;
  TrainingBackend& backend_;
  const data::TokenDataset& data_;
  const TrainLoopOptions& o_;
  data::DistributedSampler sampler_;
  at::Device device_ = at::kCPU;
  double flops_per_token_ = 0;
  int64_t tokens_per_step_ = 0;
  // Opened when this rank leads without o_.tensorboard (TrainLoopOptions::tensorboard_dir).
  std::unique_ptr<TensorBoardWriter> own_tensorboard_;
  // Whether this rank led at the last check (TakeOverLogging); the last step it logged (every
  // rank computes a logged step's metrics).
  bool leading_ = false;
  std::optional<StepMetrics> last_logged_;
};

}  // namespace

bool StepIsLogged(const TrainerConfig& c, int64_t step) {
  return step == c.steps || (c.eval_every > 0 && step % c.eval_every == 0) ||
         step % c.log_every == 0;
}

absl::StatusOr<TrainSummary> RunTraining(const TrainerConfig& config, models::LanguageModel& model,
                                         TrainingBackend& backend,
                                         const data::TokenDataset& dataset,
                                         const TrainLoopOptions& options) {
  ASSIGN_OR_RETURN(
      data::DistributedSampler sampler,
      data::DistributedSampler::Create({dataset.num_samples(data::Split::kTrain),
                                        config.global_batch_size, config.micro_batch_size,
                                        options.world_size, options.rank, config.shuffle_seed}));
  if (model.module().parameters().empty()) {
    return absl::InvalidArgumentError("the model has no parameters");
  }
  Loop loop(config, model, backend, dataset, options, std::move(sampler));
  return loop.Run();
}

}  // namespace shardline::trainer
