#include "trainer/preemption.h"

#include <signal.h>

#include <atomic>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "launch/exit_codes.h"
#include "trainer/failure_exits.h"

namespace shardline::trainer {
namespace {

std::atomic<bool> g_requested{false};
std::atomic<int64_t> g_step{0};

// How long a preempted trainer waits for the coordinator's STOP after its checkpoint committed
// (the coordinator sends it on the commit; a coordinator that is down may take a while).
constexpr absl::Duration kStopWait = absl::Minutes(10);

void OnPreempt(int) { g_requested.store(true); }

}  // namespace

void InstallPreemptionHandler() {
  struct sigaction sa = {};
  sa.sa_handler = OnPreempt;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // A save's write or a socket read goes on.
  sigaction(SIGUSR1, &sa, nullptr);
  sigset_t usr1;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  pthread_sigmask(SIG_UNBLOCK, &usr1, nullptr);
}

bool PreemptionRequested() { return g_requested.load(); }
void SetPreemptionStep(int64_t step) { g_step.store(step); }
int64_t PreemptionStep() { return g_step.load(); }

void EnablePreemption(TrainerCheckpointing* ckpt, TrainLoopOptions& loop) {
  loop.preempt_requested = PreemptionRequested;
  loop.on_preempt = [ckpt](int64_t step) {
    SL_LOG(INFO) << "preempted: saving checkpoint step " << step
                 << ", then waiting for the coordinator to stop this attempt";
    SetPreemptionStep(step);
    ckpt->SaveAfter(step);
  };
}

int EndPreempted(TrainerCheckpointing* ckpt, int64_t step,
                 const std::function<int()>& stop_signal) {
  if (absl::Status finished = ckpt->Finish(); !finished.ok()) {
    return Fail(launch::kExitInternal, "checkpoint", finished);
  }
  SL_LOG(INFO) << "preempted after step " << step << ": its checkpoint is committed; waiting for "
               << "the coordinator to stop this attempt";
  const absl::Time deadline = absl::Now() + kStopWait;
  while (stop_signal() == 0 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(50));
  if (const int signo = stop_signal(); signo != 0) {
    return FailTraining(absl::CancelledError(absl::StrCat(
                            "stopped after the preemption's checkpoint at step ", step)),
                        signo);
  }
  return Fail(launch::kExitInternal, "preempted",
              absl::DeadlineExceededError(
                  absl::StrCat("no stop came within ", absl::FormatDuration(kStopWait),
                               " of the preemption's checkpoint at step ", step)));
}

}  // namespace shardline::trainer
