#include "fsdp/comm_watchdog.h"

#include <atomic>
#include <functional>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace shardline::fsdp {
namespace {

using PollResult = CommWatchdog::PollResult;

// A fake clock, a fake communicator (async error, abort count) and fake device events.
struct Fakes {
  absl::Time now = absl::UnixEpoch() + absl::Hours(1);
  std::string async_error;
  int aborts = 0;
  int async_queries_after_abort = 0;

  CommWatchdog::Hooks Hooks() {
    CommWatchdog::Hooks h;
    h.now = [this] { return now; };
    h.async_error = [this] {
      if (aborts > 0) ++async_queries_after_abort;
      return async_error;
    };
    h.abort = [this] { ++aborts; };
    return h;
  }
};

// A device event: pending until `done` is set.
CommWatchdog::Poll EventPoll(const bool* done) {
  return [done](std::string*) { return *done ? PollResult::kDone : PollResult::kPending; };
}

TEST(CommWatchdog, FinishedWorkIsDroppedWithOkStatus) {
  Fakes f;
  CommWatchdog w("(ranks 0,1)", absl::Seconds(30), f.Hooks());
  bool done = false;
  auto work =
      w.Add("group shard[0] op all_gather step 3: ", f.now + absl::Seconds(30), EventPoll(&done));
  EXPECT_EQ(w.Tick(), 1);
  done = true;
  EXPECT_EQ(w.Tick(), 0);
  EXPECT_TRUE(w.StatusOf(*work).ok());
  EXPECT_TRUE(w.Block(*work).ok());
  EXPECT_EQ(f.aborts, 0);
  EXPECT_FALSE(w.aborted());
}

TEST(CommWatchdog, WorkPastItsDeadlineIsDeadlineExceededAndAbortsOnce) {
  Fakes f;
  CommWatchdog w("(waiting on global ranks 1)", absl::Seconds(30), f.Hooks());
  bool never = false;
  auto first =
      w.Add("group shard[0] op all_gather step 3: ", f.now + absl::Seconds(30), EventPoll(&never));
  f.now += absl::Seconds(1);
  auto second = w.Add("group shard[0] op reduce_scatter step 3: ", f.now + absl::Seconds(30),
                      EventPoll(&never));
  f.now += absl::Seconds(29);
  EXPECT_EQ(w.Tick(), 2);  // Exactly at the deadline: not past it.
  f.now += absl::Seconds(1);
  EXPECT_EQ(w.Tick(), 0);
  EXPECT_EQ(f.aborts, 1);
  EXPECT_TRUE(w.aborted());
  const absl::Status s1 = w.Block(*first);
  EXPECT_EQ(s1.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(s1.message(),
            "group shard[0] op all_gather step 3: timed out after 30s (waiting on global ranks 1)");
  // The second had a second left: aborted with the cause's code, naming its own op.
  const absl::Status s2 = w.Block(*second);
  EXPECT_EQ(s2.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(s2.message(),
            "group shard[0] op reduce_scatter step 3: aborted after an earlier error: group "
            "shard[0] op all_gather step 3: timed out after 30s (waiting on global ranks 1)");
  EXPECT_EQ(w.failure(), s1);
  EXPECT_EQ(w.Tick(), 0);
  EXPECT_EQ(f.aborts, 1);
}

TEST(CommWatchdog, TwoWorksPastTheirDeadlinesBothTimeOut) {
  Fakes f;
  CommWatchdog w("(ranks 0,1)", absl::Seconds(1), f.Hooks());
  bool never = false;
  auto a = w.Add("group world op all_gather step 0: ", f.now + absl::Seconds(1), EventPoll(&never));
  auto b = w.Add("group world op all_reduce step 0: ", f.now + absl::Seconds(1), EventPoll(&never));
  f.now += absl::Seconds(2);
  w.Tick();
  EXPECT_EQ(w.StatusOf(*a).message(),
            "group world op all_gather step 0: timed out after 1s (ranks 0,1)");
  EXPECT_EQ(w.StatusOf(*b).message(),
            "group world op all_reduce step 0: timed out after 1s (ranks 0,1)");
  EXPECT_EQ(f.aborts, 1);
}

TEST(CommWatchdog, AsyncErrorIsUnavailableLostPeerAndNeverQueriedAfterAbort) {
  Fakes f;
  CommWatchdog w("(ranks 0,1)", absl::Seconds(30), f.Hooks());
  bool never = false;
  auto work = w.Add("group replicate[0] op all_reduce step 9: ", f.now + absl::Seconds(30),
                    EventPoll(&never));
  EXPECT_EQ(w.Tick(), 1);
  f.async_error = "remote process exited or there was a network error";
  EXPECT_EQ(w.Tick(), 0);
  const absl::Status s = w.Block(*work);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.message(),
            "group replicate[0] op all_reduce step 9: lost a peer (ranks 0,1): NCCL error: remote "
            "process exited or there was a network error");
  // Use after abort: nothing touches the communicator any more.
  auto later = w.Add("group replicate[0] op all_reduce step 10: ", f.now + absl::Seconds(30),
                     EventPoll(&never));
  w.Tick();
  EXPECT_EQ(f.async_queries_after_abort, 0);
  bool ran = false;
  const absl::Status refused = w.WithComm([&] {
    ran = true;
    return absl::OkStatus();
  });
  EXPECT_FALSE(ran);
  EXPECT_EQ(refused, s);
  EXPECT_EQ(w.StatusOf(*later).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(w.StatusOf(*later).message(),
            "group replicate[0] op all_reduce step 10: aborted after an earlier error: " +
                std::string(s.message()));
}

TEST(CommWatchdog, AsyncErrorIsNotQueriedWithNothingPending) {
  Fakes f;
  f.async_error = "stale";
  CommWatchdog w("(ranks 0,1)", absl::Seconds(30), f.Hooks());
  EXPECT_EQ(w.Tick(), 0);
  EXPECT_FALSE(w.aborted());
}

TEST(CommWatchdog, FailedPollIsUnavailableCudaError) {
  Fakes f;
  CommWatchdog w("(ranks 0,1)", absl::Seconds(30), f.Hooks());
  auto work =
      w.Add("group world op barrier step 0: ", f.now + absl::Seconds(30), [](std::string* error) {
        *error = "an illegal memory access was encountered";
        return PollResult::kError;
      });
  w.Tick();
  EXPECT_EQ(w.StatusOf(*work).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(w.StatusOf(*work).message(),
            "group world op barrier step 0: CUDA error: an illegal memory access was encountered");
  EXPECT_EQ(f.aborts, 1);
}

TEST(CommWatchdog, FailFromTheIssuingThreadAbortsAndFailsPendingWork) {
  Fakes f;
  CommWatchdog w("(ranks 0,1)", absl::Seconds(30), f.Hooks());
  bool never = false;
  auto work =
      w.Add("group world op all_gather step 1: ", f.now + absl::Seconds(30), EventPoll(&never));
  const absl::Status cause =
      absl::UnavailableError("group world op all_reduce step 1: NCCL error: x");
  EXPECT_EQ(w.Fail(cause), cause);
  EXPECT_EQ(f.aborts, 1);
  EXPECT_EQ(w.StatusOf(*work).message(),
            "group world op all_gather step 1: aborted after an earlier error: " +
                std::string(cause.message()));
  // A second failure keeps the first cause and does not abort again.
  EXPECT_EQ(w.Fail(absl::InternalError("later")), cause);
  EXPECT_EQ(f.aborts, 1);
}

TEST(CommWatchdog, ThreadEndsABlockedWaitWithinTheDeadlinePlusAFewTicks) {
  // Real clock: a wait blocked on a work that never finishes ends by the thread's Tick.
  CommWatchdog::Hooks hooks;
  std::atomic<int> aborts{0};
  hooks.abort = [&] { ++aborts; };
  CommWatchdog w("(ranks 0,1)", absl::Milliseconds(200), hooks);
  w.Start(absl::Milliseconds(5));
  const absl::Time start = absl::Now();
  auto work = w.Add("group world op all_gather step 0: ", start + absl::Milliseconds(200),
                    [](std::string*) { return PollResult::kPending; });
  const absl::Status s = w.Block(*work);
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_GE(took, absl::Milliseconds(200));
  EXPECT_LT(took, absl::Seconds(2));
  // The abort runs on the thread after the failure is visible (outside the lock, so a slow abort
  // does not hold up Block): once the thread is joined it has run, once.
  w.Stop();
  EXPECT_EQ(aborts.load(), 1);
  w.Stop();  // Idempotent.
}

// An abort hook that blocks until Release(), as a slow ncclCommAbort does.
class BlockingAbort {
 public:
  std::function<void()> Hook() {
    return [this] {
      entered_ = true;
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(&released_));
    };
  }
  void WaitEntered() const {
    while (!entered_) absl::SleepFor(absl::Milliseconds(1));
  }
  void Release() {
    absl::MutexLock lock(&mu_);
    released_ = true;
  }

 private:
  absl::Mutex mu_;
  bool released_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<bool> entered_{false};
};

TEST(CommWatchdog, SlowAbortOnTheThreadDoesNotHoldUpTheIssuingThread) {
  // ncclCommAbort can take long (it joins NCCL's threads, and may wait for peers). While the
  // watchdog thread is inside it, the issuing thread's status reads and WithComm return at once
  // with the failure, and no communicator call runs.
  BlockingAbort abort;
  CommWatchdog::Hooks hooks;
  hooks.abort = abort.Hook();
  CommWatchdog w("(ranks 0,1)", absl::Milliseconds(50), hooks);
  w.Start(absl::Milliseconds(5));
  auto work = w.Add("group world op all_gather step 0: ", absl::Now() + absl::Milliseconds(50),
                    [](std::string*) { return PollResult::kPending; });
  abort.WaitEntered();
  const absl::Time start = absl::Now();
  EXPECT_EQ(w.StatusOf(*work).code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(w.Block(*work).code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(w.failure().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(w.aborted());
  bool called = false;
  EXPECT_EQ(w.WithComm([&] {
               called = true;
               return absl::OkStatus();
             }).code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_FALSE(called) << "a communicator call ran while (or after) it was being aborted";
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  abort.Release();
  w.Stop();  // Joins the thread once the abort returned.
}

TEST(CommWatchdog, SlowAbortFromFailDoesNotBlockOtherThreadsReadingTheStatus) {
  BlockingAbort abort;
  CommWatchdog::Hooks hooks;
  hooks.abort = abort.Hook();
  CommWatchdog w("(ranks 0,1)", absl::Seconds(30), hooks);
  const absl::Status cause = absl::UnavailableError("group world op all_reduce step 1: x");
  std::thread failing([&] { EXPECT_EQ(w.Fail(cause), cause); });
  abort.WaitEntered();
  EXPECT_EQ(w.failure(), cause);
  EXPECT_EQ(w.Fail(absl::InternalError("later")), cause);  // No second abort.
  abort.Release();
  failing.join();
}

}  // namespace
}  // namespace shardline::fsdp
