// InProcessCommunicator: an in-process Communicator for unit tests. N threads of one process each
// hold one InProcessCommunicator of the same InProcessCommGroup; every collective is a rendezvous
// of all N (each rank posts its tensors, waits for the others, computes its own output from
// everybody's inputs, waits again). Sums are taken in rank order, so results are deterministic.
//
// For unit tests of the FSDP engine only: real multi-rank tests use GlooCommunicator in separate
// processes. The *Async forms run synchronously and return a finished handle.
//
// Errors: a rendezvous that does not complete within `timeout` returns DEADLINE_EXCEEDED naming the
// group, the operation and the step, and breaks the communicator (later calls fail with
// FAILED_PRECONDITION), as the real backends do.
//
// Thread safety: each InProcessCommunicator is used by one thread; the group is shared and locked.
#ifndef SHARDLINE_FSDP_TESTING_IN_PROCESS_COMMUNICATOR_H_
#define SHARDLINE_FSDP_TESTING_IN_PROCESS_COMMUNICATOR_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "fsdp/communicator.h"

namespace shardline::fsdp::testing {

// Shared rendezvous state of one group of `size` ranks.
class InProcessCommGroup {
 public:
  InProcessCommGroup(std::string name, int size) : name_(std::move(name)), size_(size) {
    posted_.resize(size);
  }
  const std::string& name() const { return name_; }
  int size() const { return size_; }

  // Posts `t` for `rank`, waits until all ranks posted, runs `fn(all posted tensors)`, then waits
  // until all ranks ran fn (so nobody overwrites an input still being read).
  absl::Status Exchange(int rank, const at::Tensor& t, absl::Duration timeout,
                        const std::function<void(const std::vector<at::Tensor>&)>& fn);

 private:
  bool WaitPhase(int64_t target, absl::Duration timeout) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string name_;
  const int size_;
  absl::Mutex mu_;
  std::vector<at::Tensor> posted_ ABSL_GUARDED_BY(mu_);
  int64_t arrived_ ABSL_GUARDED_BY(mu_) = 0;  // Arrivals, counted across all phases.
};

class InProcessCommunicator : public Communicator {
 public:
  InProcessCommunicator(std::shared_ptr<InProcessCommGroup> group, int rank,
                        absl::Duration timeout = absl::Seconds(30))
      : group_(std::move(group)), rank_(rank), timeout_(timeout) {}

  // Makes `size` communicators of one group named `name`, index = rank.
  static std::vector<std::unique_ptr<InProcessCommunicator>> MakeGroup(
      const std::string& name, int size, absl::Duration timeout = absl::Seconds(30));

  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }
  const std::string& name() const override { return group_->name(); }
  void set_step(int64_t step) override { step_ = step; }

  absl::Status AllGather(const at::Tensor& in, const at::Tensor& out) override;
  std::unique_ptr<CommHandle> AllGatherAsync(const at::Tensor& in, const at::Tensor& out) override;
  absl::Status ReduceScatter(const at::Tensor& in, const at::Tensor& out, ReduceOp op) override;
  std::unique_ptr<CommHandle> ReduceScatterAsync(const at::Tensor& in, const at::Tensor& out,
                                                 ReduceOp op) override;
  absl::Status AllReduce(const at::Tensor& t, ReduceOp op) override;
  std::unique_ptr<CommHandle> AllReduceAsync(const at::Tensor& t, ReduceOp op) override;
  absl::Status Broadcast(const at::Tensor& t, int root) override;
  absl::Status Barrier() override;

  // Counters for tests that check which collectives a strategy issues.
  int64_t all_gathers() const { return all_gathers_; }
  int64_t reduce_scatters() const { return reduce_scatters_; }
  int64_t all_reduces() const { return all_reduces_; }
  int64_t async_calls() const { return async_calls_; }

 private:
  absl::Status Run(const char* op, const at::Tensor& t,
                   const std::function<void(const std::vector<at::Tensor>&)>& fn);

  std::shared_ptr<InProcessCommGroup> group_;
  const int rank_;
  const absl::Duration timeout_;
  int64_t step_ = 0;
  absl::Status broken_;
  int64_t all_gathers_ = 0, reduce_scatters_ = 0, all_reduces_ = 0, async_calls_ = 0;
};

}  // namespace shardline::fsdp::testing

#endif  // SHARDLINE_FSDP_TESTING_IN_PROCESS_COMMUNICATOR_H_
