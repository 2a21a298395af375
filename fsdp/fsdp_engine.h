// FsdpEngine: wraps a LibTorch module for Fully Sharded Data Parallel training; implements
// UnitRunner so the model's RunUnit calls drive the per-unit gather/free schedule.
// docs/fsdp_step.md walks through one step and describes every option (fsdp/engine_options.h).
//
//   engine->set_step(step);
//   for each micro-batch:
//     RETURN_IF_ERROR(engine->BeginForward());          // gathers the root-gathered units
//     at::Tensor loss = model->forward(x, engine.get()) // RunUnit -> Run(): gather, compute, free
//     RETURN_IF_ERROR(engine->Backward(loss / n, /*sync_gradients=*/last_micro_batch));
//   ASSIGN_OR_RETURN(double norm, optimizer->Step());   // fsdp/sharded_optimizer.h
//
// Parameters between steps: with S > 1 the module's parameters are views of freed buffers (no
// memory) except while a unit is gathered; do not read them directly. Use FullParamState(), or
// an eval forward through the engine (BeginForward, forward under NoGradGuard, ReshardAll).
//
// Errors: a failed collective inside the forward (Run) or in an autograd hook cannot return a
// status through LibTorch, so it is thrown as common/torch_status.h's StatusException, which
// TorchTry / TorchCall turn back into the collective's own status (DEADLINE_EXCEEDED /
// UNAVAILABLE naming group, op and step). Backward() returns it directly. After a failed
// collective the engine is broken: BeginForward(), Run() and Backward() fail with it again.
//
// Thread safety: one training thread. Autograd hooks may run on LibTorch's device threads while
// Backward() blocks, never concurrently with other engine calls.
#ifndef SHARDLINE_FSDP_FSDP_ENGINE_H_
#define SHARDLINE_FSDP_FSDP_ENGINE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/Stream.h>
#include <torch/nn/module.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fsdp/activation_checkpoint.h"
#include "fsdp/communicator.h"
#include "fsdp/engine_options.h"
#include "fsdp/engine_state.h"
#include "fsdp/flat_param.h"
#include "fsdp/gather_limiter.h"
#include "fsdp/layout.h"
#include "fsdp/param_init.h"
#include "fsdp/unit_runner.h"
#include "fsdp/wrap_policy.h"

namespace shardline::fsdp {

namespace internal {
struct EngineHooks;  // The autograd hooks' way in (fsdp_engine.cc).
}  // namespace internal

class FsdpEngine : public UnitRunner {
 public:
  // Wraps `model` (parameters must be fp32, on one device). Communicators are borrowed and must
  // outlive the engine: `shard` spans the rank's shard group (S ranks), `replicate` its replicate
  // group (R ranks); either may be nullptr when its degree is 1.
  // Errors: INVALID_ARGUMENT when a communicator's size or rank does not match the layout (the
  // message names both), or for a bad wrap policy; the status of a failed broadcast
  // (sync_module_states).
  // Sharded initialization (fsdp/param_init.h): with `deferred`, the model's parameters are
  // storage-less and this rank builds only its shards, on deferred->device, from
  // deferred->values (one parameter at a time); sync_module_states then broadcasts the shards
  // over the replicate group instead of the parameters. Errors as well: INVALID_ARGUMENT when a
  // parameter holds memory, or the initializer's names or shapes do not match the model's.
  static absl::StatusOr<std::unique_ptr<FsdpEngine>> Create(
      std::shared_ptr<torch::nn::Module> model, const ParallelLayout& layout, Communicator* shard,
      Communicator* replicate, const FsdpEngineOptions& options,
      const DeferredInit* deferred = nullptr);
  ~FsdpEngine() override;

  // Sets the step quoted in collective error messages.
  void set_step(int64_t step);

  // Starts a forward pass: gathers the root-gathered units.
  absl::Status BeginForward();
  // UnitRunner: gathers the units at this hook module, runs body, attaches the pre-backward
  // hook, frees per strategy. Throws StatusException on a failed collective.
  at::Tensor Run(const torch::nn::Module& module, const at::Tensor& input,
                 const UnitBody& body) override;
  // Runs loss.backward() and the per-unit reductions; frees everything gathered afterwards.
  // sync_gradients=false is PyTorch's no_sync: gradients accumulate unreduced until the next
  // syncing call.
  absl::Status Backward(const at::Tensor& loss, bool sync_gradients = true);
  // Frees every gathered unit (after an eval forward, say). No collectives.
  void ReshardAll();

  // True after a Backward(sync_gradients=false) until a syncing one.
  bool gradients_pending() const { return grads_pending_; }
  // Zeroes the reduced gradient shards (the optimizer does this after a step).
  void ZeroShardGrads();
  // Replica-group fault tolerance: forgets the step in progress, after a failure or an aborted
  // vote. Waits for (and drops) any gather or reduction still in flight, frees gathered
  // parameters and unsharded gradients (and the parameters' .grad views), zeroes the gradient
  // shards and clears gradients_pending(). The recorded collective error stays until
  // SetCommunicators. No collectives.
  void DropStepGradients();
  // Replica-group fault tolerance: the communicators of a new membership epoch, between steps
  // (after DropStepGradients when the step failed). Borrowed, as in Create; the old ones may be
  // destroyed once this returns. The replicate group may have any size 1..R (the live replica
  // groups); gradients then average over it (ReduceOp::kAvg). Clears the recorded collective
  // error. Errors: FAILED_PRECONDITION while a gather, reduction or no_sync gradient is pending
  // (naming which), INVALID_ARGUMENT when the shard group is not S ranks with this rank at its
  // shard index, or the replicate group is larger than R or places this rank after its own
  // replica group index (its rank is the position of this rank's group among the live ones).
  absl::Status SetCommunicators(Communicator* shard, Communicator* replicate);

  MemoryStats memory_stats() const { return ComputeMemoryStats(flats_, peaks_); }
  // The device the model computes on (where gathered parameters and gradients live).
  at::Device device() const { return device_; }
  bool cpu_offload() const { return options_.cpu_offload; }
  // With cpu_offload on a CUDA model: waits until the device finished every queued copy, so the
  // host shards may be written (LoadFullParamState, the optimizer step and checkpoint loads do;
  // an asynchronous host->device copy may still be reading them otherwise). No-op otherwise.
  void WaitForOffloadCopies() const;
  // The first AsyncError of the shard and replicate communicators (communicator.h), or OK. On
  // CUDA a collective whose Wait returned may fail later (its watchdog's deadline); once the host
  // has read a value computed after it (a loss, the gradient norm), this says whether it did.
  absl::Status CommAsyncError() const;
  // Most hook groups gathered at once so far (see limit_all_gathers), and the prefetches the
  // limit skipped.
  int peak_gathered_groups() const { return limiter_.peak_gathered_groups(); }
  int64_t prefetches_skipped() const { return limiter_.prefetches_skipped(); }

  // This rank's shard of every parameter, in unit order (host tensors with cpu_offload; the
  // call waits for queued copies first, so the views may be written at once).
  std::vector<ShardSlice> LocalParamState() const;
  // Every parameter gathered to its full shape (collective over the shard group: call on every
  // rank). With rank0_only, other ranks get an empty list. Canonical names only; see aliases().
  // Tensors are on device(), or on the host with cpu_offload.
  absl::StatusOr<std::vector<std::pair<std::string, at::Tensor>>> FullParamState(bool rank0_only);
  // Loads full tensors (each rank copies its shard out). Accepts canonical names or aliases.
  // Errors: INVALID_ARGUMENT naming a missing parameter or a shape mismatch.
  absl::Status LoadFullParamState(const std::map<std::string, at::Tensor>& state);
  // Alias name -> canonical name, for tied parameters.
  std::map<std::string, std::string> aliases() const { return AliasesOf(flats_); }

  const std::vector<std::unique_ptr<FlatParam>>& flat_params() const { return flats_; }
  const ParallelLayout& layout() const { return layout_; }
  int rank() const { return options_.rank; }
  Communicator* shard_comm() const { return shard_; }
  Communicator* replicate_comm() const { return replicate_; }
  // Names of the units and where each is gathered (for logs and tests): (unit, hook path).
  std::vector<std::pair<std::string, std::string>> UnitSummary() const;

 private:
  friend struct internal::EngineHooks;
  // One FSDP unit: its flat parameter, where it is gathered, and its gradients this backward.
  struct Unit {
    FlatParam* flat = nullptr;
    int hook_group = -1;  // -1: root-gathered.
    int grads_expected = 0;
    int grads_ready = 0;              // This backward.
    bool post_backward_done = false;  // This backward.
  };
  // A unit's gradient reduction, from its issue to its accumulation into the gradient shard.
  struct PendingReduce {
    int unit;
    std::unique_ptr<CommHandle> handle;  // Null when there is nothing to communicate (W = 1).
    at::Tensor src;                      // The flat gradient in reduce_dtype, alive until done.
    at::Tensor reduced;                  // [shard_numel], or src itself when S = 1.
    // CUDA HYBRID_SHARD: `handle` is already the replicate all-reduce, chained on the
    // reduce-scatter (StartReduce); FinishOldestReduce only waits for it.
    bool replicated = false;
  };
  // An all-gather in flight (prefetch).
  struct PendingGather {
    std::unique_ptr<CommHandle> handle;
    // The (cast) shard being sent, or with cpu_offload its device staging copy (the
    // host->device copy into it is asynchronous too); alive until the gather finished.
    at::Tensor src;
  };
  // cpu_offload: a reduced gradient shard being copied to the host (pinned buffer).
  struct OffloadedGrad {
    int unit;
    at::Tensor host;
  };

  FsdpEngine(std::shared_ptr<torch::nn::Module> model, const ParallelLayout& layout,
             Communicator* shard, Communicator* replicate, const FsdpEngineOptions& options);
  absl::Status Init(const DeferredInit* deferred);
  // Builds the FlatParam of one planned unit, registers it in `hook_group` (-1: root-gathered)
  // and installs its parameters' gradient hooks.
  absl::Status AddUnit(const UnitPlan& plan, int hook_group, const DeferredInit* deferred);
  // Broadcasts the parameters (or, after a sharded initialization, the shards over the
  // replicate group) and buffers from rank 0.
  absl::Status SyncModuleStates(bool sharded);

  // Autograd hooks (through internal::EngineHooks). Throw StatusException on failure.
  void PreBackward(int group);      // Before a hook group's backward: re-gather, prefetch.
  void OnParamGradReady(int unit);  // After a parameter's gradient accumulated.

  // Gather schedule. These throw nothing; they return statuses and record the first failure.
  absl::Status Gather(int unit);  // Waits for a pending prefetch, or gathers now.
  // Allocates the unit's full buffer and gathers into it (cast to param_dtype first).
  absl::Status StartGather(int unit, bool async);
  void PrefetchGroup(int group);                     // Starts async all-gathers of a hook group.
  void PrefetchNeighbour(int group, int direction);  // +1: next in forward order, -1: previous.
  absl::Status WaitPending(int unit);
  void Free(int unit);

  // Gradient reduction: the one path. StartReduce issues a unit's reduce-scatter (or S = 1
  // all-reduce) asynchronously and queues it; FinishOldestReduce waits for the oldest, runs the
  // replicate all-reduce, accumulates into the gradient shard and frees the flat gradient.
  absl::Status PostBackward(int unit);
  absl::Status StartReduce(int unit);
  absl::Status FinishOldestReduce();
  // The unit's flat gradient in reduce_dtype (itself when the dtypes agree).
  at::Tensor ReduceSource(const FlatParam& flat) const;
  // Adds a unit's reduced gradient shard into its gradient shard; with cpu_offload it starts the
  // device->host copy instead, and DrainOffloadedGrads() (end of Backward) adds it.
  void AccumulateShardGrad(int unit, const at::Tensor& reduced);
  void DrainOffloadedGrads();

  // Records the first error and returns it; a communicator's AsyncError takes precedence.
  absl::Status Fail(absl::Status s);
  // A guard making device_ current (CUDA); empty on the CPU.
  c10::OptionalDeviceGuard DeviceScope() const;
  // CUDA: the side stream the replicate all-reduce is chained on (from the pool, on first use).
  c10::Stream ReplicateStream();

  std::shared_ptr<torch::nn::Module> model_;
  ParallelLayout layout_;
  Communicator* shard_;
  Communicator* replicate_;
  FsdpEngineOptions options_;

  std::vector<std::unique_ptr<FlatParam>> flats_;
  std::vector<std::unique_ptr<Unit>> units_;
  std::vector<std::vector<int>> hook_groups_;           // Hook group -> unit indices.
  std::map<const torch::nn::Module*, int> hook_index_;  // Hook module -> hook group.
  std::vector<int> root_units_;                         // Root-gathered units.
  // Prefetch bookkeeping: the hook groups in the order the last complete forward ran them, the
  // order being recorded by the current forward, and in-flight all-gathers per unit.
  std::vector<int> forward_order_;
  std::vector<int> recording_order_;
  std::map<int, PendingGather> pending_gathers_;
  GatherLimiter limiter_;
  std::vector<PendingReduce> pending_reduces_;  // Oldest first.
  std::vector<OffloadedGrad> offloaded_grads_;  // Added by DrainOffloadedGrads().
  ActivationCheckpointer checkpointer_;
  MemoryPeaks peaks_;
  at::Device device_ = at::kCPU;
  std::optional<c10::Stream> replicate_stream_;

  bool in_backward_ = false;
  bool sync_ = true;
  bool grads_pending_ = false;
  absl::Status first_error_;
};

// The LibTorch dtype of a mixed-precision option.
at::ScalarType ToScalarType(Dtype dtype);

}  // namespace shardline::fsdp

#endif  // SHARDLINE_FSDP_FSDP_ENGINE_H_
