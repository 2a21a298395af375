// CommWatchdog: enforces the deadlines of a GPU communicator's collectives from a thread of its
// own, so that waiting for a collective never blocks the host (after PyTorch's NCCL process
// group, whose watchdog thread polls each work's end event and aborts the communicator when one
// runs past its timeout).
//
// The communicator registers each collective it issued (Add) with a poll of its device-side
// completion (cudaEventQuery of its done event). Every Tick (the thread runs one every
// `interval`) polls the pending works: finished ones are dropped; if one ran past its deadline,
// or the communicator reports an asynchronous error (a lost peer), or a poll fails, the
// watchdog aborts the communicator once (which ends every kernel still waiting on a peer) and
// fails every pending work:
//   - the work that ran out: DEADLINE_EXCEEDED "<prefix>timed out after <timeout> <members>";
//   - an asynchronous error: UNAVAILABLE "<prefix>lost a peer <members>: NCCL error: ...";
//   - a failed poll: UNAVAILABLE "<prefix>CUDA error: ...";
//   - the other pending works: their own timed-out error if their deadline passed too, else the
//     cause's code with "<prefix>aborted after an earlier error: <cause>".
// From then on the watchdog is aborted: it never calls the communicator hooks again, and
// WithComm refuses to run communicator calls (no use of a communicator after abort).
//
// Device-independent: the hooks (poll, async error, abort, clock) are plain functions, so the
// logic is tested on the CPU with fakes (comm_watchdog_test.cc).
//
// Thread safety: every method may be called from any thread. The poll and async-error hooks run
// under the watchdog's lock, as do WithComm's calls. The abort hook runs once, after the lock
// was released: the watchdog is marked aborted first (so WithComm refuses every later call and
// no communicator call can race the abort), and an abort that takes long (ncclCommAbort waits for
// NCCL's threads, sometimes for peers) must not hold up StatusOf, Wait or failure() on the
// issuing thread, which then report the failure at once.
#ifndef SHARDLINE_FSDP_COMM_WATCHDOG_H_
#define SHARDLINE_FSDP_COMM_WATCHDOG_H_

#include <functional>
#include <list>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace shardline::fsdp {

class CommWatchdog {
 public:
  enum class PollResult { kDone, kPending, kError };
  // Polls one work's completion; on kError sets *error (e.g. cudaGetErrorString).
  using Poll = std::function<PollResult(std::string* error)>;

  struct Hooks {
    // The communicator's asynchronous error (ncclCommGetAsyncError): "" when none.
    std::function<std::string()> async_error = [] { return std::string(); };
    // Aborts the communicator (ncclCommAbort). Called at most once, without the lock held.
    std::function<void()> abort = [] {};
    std::function<absl::Time()> now = [] { return absl::Now(); };
  };

  // One registered collective.
  class Work {
   public:
    const std::string& prefix() const { return prefix_; }
    absl::Time deadline() const { return deadline_; }

   private:
    friend class CommWatchdog;
    Work(std::string prefix, absl::Time deadline, Poll poll)
        : prefix_(std::move(prefix)), deadline_(deadline), poll_(std::move(poll)) {}
    const std::string prefix_;
    const absl::Time deadline_;
    Poll poll_;
    bool finished_ = false;  // Guarded by the watchdog's mu_.
    absl::Status status_;    // Guarded by the watchdog's mu_.
  };

  // `members`: who the group waits on, quoted in errors (comm_args.h's DescribeGroupMembers);
  // `timeout`: quoted in timed-out errors.
  CommWatchdog(std::string members, absl::Duration timeout, Hooks hooks);
  ~CommWatchdog();  // Stops the thread (Stop).

  // Starts the thread: one Tick every `interval`.
  void Start(absl::Duration interval);
  // Stops and joins the thread; pending works stay pending. Idempotent.
  void Stop();

  // Registers a collective issued now. After an abort the work is failed at once (with the
  // abort's cause).
  std::shared_ptr<Work> Add(std::string prefix, absl::Time deadline, Poll poll);

  // One pass over the pending works (see the file comment). Returns the number still pending.
  int Tick();

  // The work's status: OK while pending or once finished, its error once failed.
  absl::Status StatusOf(const Work& work) const;
  // Blocks until the work finished or failed (bounded: a Tick fails it at its deadline while
  // the thread runs); returns StatusOf.
  absl::Status Block(const Work& work) const;

  // The first failure (the abort's cause), or OK.
  absl::Status failure() const;
  bool aborted() const;

  // Runs `call` (a communicator call: enqueue a collective, read its error) under the lock,
  // unless the communicator was aborted; then returns the abort's cause instead.
  absl::Status WithComm(const std::function<absl::Status()>& call);

  // Fails the communicator from the issuing thread (an enqueue error or timeout): aborts once,
  // fails every pending work as a Tick would, returns `cause` (or the earlier cause if the
  // watchdog had already failed).
  absl::Status Fail(absl::Status cause);

 private:
  // Tick's work under the lock; sets *abort when the caller must run the abort hook.
  int TickLocked(bool* abort) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records the failure, marks the watchdog aborted and fails every pending work. Returns true
  // the first time: the caller then runs hooks_.abort() once it released the lock.
  bool FailLocked(absl::Status cause, Work* culprit) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status TimedOut(const Work& work) const;

  const std::string members_;
  const absl::Duration timeout_;
  const Hooks hooks_;

  mutable absl::Mutex mu_;
  std::list<std::shared_ptr<Work>> pending_ ABSL_GUARDED_BY(mu_);
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
  bool aborted_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace shardline::fsdp

#endif  // SHARDLINE_FSDP_COMM_WATCHDOG_H_
