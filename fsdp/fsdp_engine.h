// FsdpEngine: wraps a LibTorch module for Fully Sharded Data Parallel training; implements
// UnitRunner so the model's RunUnit calls drive the per-unit gather/free schedule.
//
// One training step (see docs/fsdp_step.md):
//   engine->set_step(step);
//   for each micro-batch:
//     RETURN_IF_ERROR(engine->BeginForward());          // gathers the root-gathered units
//     at::Tensor loss = model->forward(x, engine.get()) // RunUnit -> Run(): gather, compute, free
//     RETURN_IF_ERROR(engine->Backward(loss / n, /*sync_gradients=*/last_micro_batch));
//   ASSIGN_OR_RETURN(double norm, optimizer->Step());   // fsdp/sharded_optimizer.h
//
// Strategies (from the ParallelLayout of fsdp/layout.h, passed as MakeEngineLayout(layout);
// S = shard degree, R = W / S):
//   FULL_SHARD / HYBRID_SHARD        gather per unit in forward, free after it, re-gather in
//                                    backward (pre-backward hook), free after the unit's grads;
//   SHARD_GRAD_OP / HYBRID_SHARD_ZERO2  gather in forward, keep until the unit's grads are done;
//   NO_SHARD (S = 1)                  parameters are never gathered or freed.
// Root-gathered units (outside every RunUnit hook: embeddings, final norm, head) are gathered
// by BeginForward() and freed once their gradients are reduced, under every strategy.
// Gradients: when all of a unit's parameters have accumulated their gradient (post-accumulate
// hooks), the flat gradient is reduce-scattered in the shard group with kAvg (divides by S), then
// for R > 1 all-reduced in the replicate group with kAvg (divides by R): the mean over all W
// ranks, as DDP computes it. With S = 1 (NO_SHARD) there is only the all-reduce.
// Backward(loss, sync_gradients=false) is PyTorch's no_sync: the unsharded flat gradients keep
// accumulating locally and are reduced on the next Backward with sync_gradients=true.
//
// Parameters between steps: with S > 1 the module's parameters are views of freed buffers (no
// memory) except while a unit is gathered; do not read them directly. Use FullParamState(), or
// an eval forward through the engine (BeginForward, forward under NoGradGuard, ReshardAll).
//
// Errors: collective failures inside forward/backward throw fsdp::CommError through LibTorch;
// Backward() catches it and returns its status; BeginForward() and Backward() return the first
// failure again on every later call (the engine is broken after a failed collective).
//
// Thread safety: one training thread. Autograd hooks may run on LibTorch's device threads while
// Backward() blocks, never concurrently with other engine calls.
#ifndef SHARDLINE_FSDP_FSDP_ENGINE_H_
#define SHARDLINE_FSDP_FSDP_ENGINE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fsdp/communicator.h"
#include "fsdp/engine_layout.h"
#include "fsdp/flat_param.h"
#include "fsdp/unit_runner.h"
#include "fsdp/wrap_policy.h"

namespace shardline::fsdp {

struct FsdpEngineOptions {
  int rank = 0;  // Global rank in [0, W).
  WrapPolicy wrap_policy;
  // Broadcast parameters and buffers from rank 0 at wrap time (PyTorch's sync_module_states).
  bool sync_module_states = true;
  // Prefetch changes only timing, never numerics. Hook groups are prefetched in the order the
  // previous forward pass ran them (nothing is prefetched before one forward has been seen).
  // forward_prefetch: while hook group i computes, group i+1 is all-gathered asynchronously.
  bool forward_prefetch = false;
  // kPre: before a group's backward computes, the group before it is all-gathered
  // asynchronously; kPost: after a group's gradients are reduced. kNone: gather on demand.
  enum class BackwardPrefetch { kNone, kPre, kPost };
  BackwardPrefetch backward_prefetch = BackwardPrefetch::kNone;
  // Rate limiter (PyTorch's limit_all_gathers): at most two hook groups gathered at once
  // (counted from the gather until the free; groups the strategy keeps gathered after their
  // forward, SHARD_GRAD_OP, and the root units do not count). A prefetch that would make a
  // third is skipped (the group is then gathered on demand); an on-demand gather is never
  // delayed, since on a CPU job nothing could free memory while the training thread waits.
  // LibTorch's autograd runs a unit's gradient accumulation before the previous unit's
  // backward, so on-demand gathers never make a third either; peak_gathered_groups() shows it.
  bool limit_all_gathers = true;
  // Activation checkpointing per unit: Run() computes a hook group's body without keeping its
  // activations (only the input is saved) and calls the body again with grad in backward, right
  // after the pre-backward hook re-gathered the unit's parameters (FULL_SHARD) and started any
  // backward prefetch; the recomputed graph's backward (a reentrant autograd call) accumulates
  // the unit's gradients, whose hooks reduce and free the unit as usual. The RNG state of the
  // input's device is saved and restored around the recompute, so dropout draws the same mask:
  // losses and gradients are bit-identical to a run without checkpointing. Root units (no
  // RunUnit) are not checkpointed. Bodies must capture what they use by value (unit_runner.h).
  bool activation_checkpointing = false;
  // Reduce a unit's gradient asynchronously (ReduceScatterAsync, or AllReduceAsync when S = 1)
  // while backward continues with the next unit; at most two reductions are in flight (their
  // flat gradients stay allocated until done), and all finish before Backward() returns.
  bool overlap_reduce = true;
  // Mixed precision (PyTorch's MixedPrecision): parameters are all-gathered and computed in
  // param_dtype (the module's parameters become param_dtype views of the gathered buffer, so the
  // model computes in it; its logits come out in it too), gradients are produced in param_dtype,
  // reduced (reduce-scatter, replicate all-reduce) in reduce_dtype and added into the fp32
  // gradient shards; the fp32 master shards and the optimizer state never change dtype. Floating
  // buffers are cast to buffer_dtype once at wrap time. Each of float32, bfloat16, float16.
  // no_sync micro-batches accumulate their unreduced gradients in param_dtype. float16 needs
  // loss scaling (fsdp/loss_scaler.h) to keep small gradients from flushing to zero.
  at::ScalarType param_dtype = at::kFloat;
  at::ScalarType reduce_dtype = at::kFloat;
  at::ScalarType buffer_dtype = at::kFloat;
  // CPU offload (PyTorch's CPUOffload(params=True) / FSDP2's CPUOffloadPolicy): each rank's
  // persistent state (fp32 parameter shards, gradient shards, hence the optimizer state) lives in
  // host memory, pinned for CUDA models; the device holds only what is gathered or computing.
  // Before a gather the shard is copied host->device (cast to param_dtype) into a staging buffer
  // (asynchronously; it stays alive until the gather finished); after a unit's reduction the
  // reduced shard is copied device->host asynchronously and added into the host gradient shard
  // when Backward() ends (after one wait for the device). The optimizer then steps on the host.
  // NO_SHARD (S = 1) gathers too: the device buffer is a copy of the host shard, freed like a
  // sharded unit's. Numerics are unchanged. Meant for CUDA models; on a CPU model it only
  // separates the buffers (what the CPU tests use to check the bookkeeping).
  bool cpu_offload = false;
};

// Bytes this rank holds, by kind. Persistent state = param_shard + grad_shard (+ optimizer).
struct MemoryStats {
  int64_t param_shard_bytes = 0;     // fp32 master shards (padding included).
  int64_t grad_shard_bytes = 0;      // Reduced gradient shards (padding included).
  int64_t padding_bytes = 0;         // Padding elements in this rank's shards, x4 bytes.
  int64_t gathered_param_bytes = 0;  // Full parameter buffers held now (S > 1 only).
  int64_t peak_gathered_param_bytes = 0;
  int64_t unsharded_grad_bytes = 0;  // Full flat gradients held now.
  int64_t peak_unsharded_grad_bytes = 0;
  int64_t num_params = 0;  // P: unique parameter elements of the model.
  // Where the persistent shards (param_shard_bytes + grad_shard_bytes) live: on the compute
  // device, or in host memory with cpu_offload (then device_shard_bytes is 0). On a CPU job the
  // compute device is the CPU.
  int64_t device_shard_bytes = 0;
  int64_t host_offloaded_shard_bytes = 0;
};

// One original tensor's piece held by this rank.
struct ShardSlice {
  std::string name;
  std::vector<int64_t> global_shape;
  int64_t start = 0, end = 0;  // [start, end) in the tensor's flattened (row-major) elements.
  at::Tensor local;            // 1-D, end - start elements; a VIEW of the rank's state: copy_()
                               // into it to load a checkpoint.
};

class FsdpEngine : public UnitRunner {
 public:
  // Wraps `model` (parameters must be fp32, on one device). Communicators are borrowed and must
  // outlive the engine: `shard` spans the rank's shard group (S ranks), `replicate` its replicate
  // group (R ranks); either may be nullptr when its degree is 1.
  // Errors: INVALID_ARGUMENT when a communicator's size or rank does not match the layout (the
  // message names both), or for a bad wrap policy; the status of a failed broadcast
  // (sync_module_states).
  static absl::StatusOr<std::unique_ptr<FsdpEngine>> Create(
      std::shared_ptr<torch::nn::Module> model, const EngineLayout& layout, Communicator* shard,
      Communicator* replicate, const FsdpEngineOptions& options);
  ~FsdpEngine() override;

  // Sets the step quoted in collective error messages.
  void set_step(int64_t step);

  // Starts a forward pass: gathers the root-gathered units.
  absl::Status BeginForward();
  // UnitRunner: gathers the units at this hook module, runs body, attaches the pre-backward
  // hook, frees per strategy. Throws CommError on a failed collective.
  at::Tensor Run(const torch::nn::Module& module, const at::Tensor& input,
                 const UnitBody& body) override;
  // Runs loss.backward() and the per-unit reductions; frees everything gathered afterwards.
  absl::Status Backward(const at::Tensor& loss, bool sync_gradients = true);
  // Frees every gathered unit (after an eval forward, say). No collectives.
  void ReshardAll();

  // True after a Backward(sync_gradients=false) until a syncing one.
  bool gradients_pending() const { return grads_pending_; }
  // Zeroes the reduced gradient shards (the optimizer does this after a step).
  void ZeroShardGrads();

  MemoryStats memory_stats() const;
  // The device the model computes on (where gathered parameters and gradients live).
  at::Device device() const { return device_; }
  bool cpu_offload() const { return options_.cpu_offload; }
  // With cpu_offload on a CUDA model: waits until the device finished every queued copy, so the
  // host shards may be written (LoadFullParamState, the optimizer step and checkpoint loads do;
  // an asynchronous host->device copy may still be reading them otherwise). No-op otherwise.
  void WaitForOffloadCopies() const;
  // Most hook groups gathered at once so far (see limit_all_gathers), and the prefetches the
  // limit skipped.
  int peak_gathered_groups() const { return peak_gathered_groups_; }
  int64_t prefetches_skipped() const { return prefetches_skipped_; }

  // This rank's shard of every parameter, in unit order (host tensors with cpu_offload; the
  // call waits for queued copies first, so the views may be written at once).
  std::vector<ShardSlice> LocalParamState() const;
  // Every parameter gathered to its full shape (collective over the shard group: call on every
  // rank). With rank0_only, other ranks get an empty list. Canonical names only; see aliases().
  // Tensors are on device(), or on the host with cpu_offload (gathered on the device one unit at
  // a time).
  absl::StatusOr<std::vector<std::pair<std::string, at::Tensor>>> FullParamState(bool rank0_only);
  // Loads full tensors (each rank copies its shard out). Accepts canonical names or aliases.
  // Errors: INVALID_ARGUMENT naming a missing parameter or a shape mismatch.
  absl::Status LoadFullParamState(const std::map<std::string, at::Tensor>& state);
  // Alias name -> canonical name, for tied parameters.
  std::map<std::string, std::string> aliases() const;

  const std::vector<std::unique_ptr<FlatParam>>& flat_params() const { return flats_; }
  const EngineLayout& layout() const { return layout_; }
  int rank() const { return options_.rank; }
  Communicator* shard_comm() const { return shard_; }
  Communicator* replicate_comm() const { return replicate_; }
  // Names of the units and where each is gathered (for logs and tests): (unit, hook path).
  std::vector<std::pair<std::string, std::string>> UnitSummary() const;

  // Called by the autograd hooks; not for users.
  void PreBackward(int group);
  void OnParamGradReady(int unit);
  // Activation checkpointing: the forward of checkpointed call `call`, and its backward (the
  // recompute); the latter returns the input's gradient (undefined if it needs none).
  at::Tensor CheckpointForward(int64_t call, const at::Tensor& input);
  at::Tensor CheckpointBackward(int64_t call, const at::Tensor& input, bool input_requires_grad,
                                const at::Tensor& grad);

 private:
  struct Unit;
  FsdpEngine(std::shared_ptr<torch::nn::Module> model, const EngineLayout& layout,
             Communicator* shard, Communicator* replicate, const FsdpEngineOptions& options);
  absl::Status Init();
  absl::Status SyncModuleStates();

  // Each may throw nothing; they return statuses and record the first failure.
  absl::Status Gather(int unit);  // Waits for a pending prefetch, or gathers now.
  // Allocates the unit's full buffer and gathers into it (cast to param_dtype first).
  absl::Status StartGather(int unit, bool async);
  // The unit's flat gradient in reduce_dtype (itself when the dtypes agree).
  at::Tensor ReduceSource(const FlatParam& flat) const;
  void PrefetchGroup(int group);                     // Starts async all-gathers of a hook group.
  void PrefetchNeighbour(int group, int direction);  // +1: next in forward order, -1: previous.
  absl::Status WaitPending(int unit);
  void Free(int unit);
  absl::Status ReduceGrad(int unit);
  // Async reductions: start one, finish the oldest (wait, replicate all-reduce, accumulate).
  absl::Status StartReduce(int unit);
  absl::Status FinishOldestReduce();
  // Adds a unit's reduced gradient shard into its gradient shard; with cpu_offload it starts the
  // device->host copy instead, and DrainOffloadedGrads() (end of Backward) adds it.
  void AccumulateShardGrad(int unit, const at::Tensor& reduced);
  void DrainOffloadedGrads();
  absl::Status PostBackward(int unit);
  absl::Status Fail(absl::Status s);  // Records the first error, returns it.
  void UpdatePeaks();
  void MarkGathered(int unit);  // Counts the unit's hook group as gathered (limit_all_gathers).

  std::shared_ptr<torch::nn::Module> model_;
  EngineLayout layout_;
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
  struct PendingGather {
    std::unique_ptr<CommHandle> handle;
    // The (cast) shard being sent, or with cpu_offload its device staging copy (the
    // host->device copy into it is asynchronous too); alive until the gather finished.
    at::Tensor src;
  };
  std::map<int, PendingGather> pending_gathers_;
  std::set<int> gathered_groups_;  // Hook groups gathered now (limit_all_gathers).
  int peak_gathered_groups_ = 0;
  int64_t prefetches_skipped_ = 0;
  struct PendingReduce {
    int unit;
    std::unique_ptr<CommHandle> handle;
    at::Tensor src;      // The flat gradient in reduce_dtype, alive until done.
    at::Tensor reduced;  // [shard_numel], or src itself when S = 1.
  };
  std::vector<PendingReduce> pending_reduces_;  // Oldest first.
  // cpu_offload: reduced gradient shards being copied to the host (pinned buffers), added into
  // the units' gradient shards by DrainOffloadedGrads().
  struct OffloadedGrad {
    int unit;
    at::Tensor host;
  };
  std::vector<OffloadedGrad> offloaded_grads_;
  at::Device device_ = at::kCPU;
  // Activation checkpointing: the bodies of this forward's checkpointed calls and the RNG
  // state each started from; dropped when Backward() returns.
  struct CheckpointedCall {
    UnitBody body;
    at::Tensor rng_state;  // Undefined when the device has no generator state to restore.
  };
  std::vector<CheckpointedCall> checkpointed_;

  bool in_backward_ = false;
  bool sync_ = true;
  bool grads_pending_ = false;
  absl::Status first_error_;
  int64_t peak_gathered_ = 0;
  int64_t peak_unsharded_grad_ = 0;
};

}  // namespace shardline::fsdp

#endif  // SHARDLINE_FSDP_FSDP_ENGINE_H_
