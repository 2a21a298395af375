// The trainer's stop signals: SIGTERM (the worker daemon's STOP) and SIGINT (Ctrl-C) record
// which arrived; the loop polls StopSignal between steps and ends CANCELLED, exiting 128 + the
// signal (trainer/failure_exits.h). Tests only: SHARDLINE_TEST_IGNORE_SIGTERM=1 ignores SIGTERM
// (trainer_main.cc's header). SIGUSR1, a preemption, is trainer/preemption.h's.
//
// Thread safety: a process-wide atomic; the handler only stores.
#ifndef SHARDLINE_TRAINER_PROCESS_SIGNALS_H_
#define SHARDLINE_TRAINER_PROCESS_SIGNALS_H_

namespace shardline::trainer {

// Installs the handlers. Call from the main thread at start.
void InstallStopSignals();
// The stop signal that arrived (0: none yet).
int StopSignal();

}  // namespace shardline::trainer

#endif  // SHARDLINE_TRAINER_PROCESS_SIGNALS_H_
