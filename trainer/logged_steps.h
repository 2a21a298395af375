// LoggedSteps: a trainer's own metrics file (--metrics_out, JSON lines) read back as the
// ProgressReports of its logged steps, for rank 0 to send before each checkpoint commit.
//
// Why: a step's progress reaches the coordinator through the worker daemon, which tails this
// file and relays it; a commit goes from the trainer straight to the coordinator. A daemon
// SIGKILLed between the two (found by the chaos soak, #30) loses the relayed-later steps, and the
// next attempt resumes after the commit, so nobody reports them again: the job's series has a
// hole. Sending the steps up to the commit first, on the commit's own path, closes it: a step
// a later attempt resumes after was reported (and taken) before the commit that lets it resume.
// Duplicates of what the daemon relayed are no-ops at the coordinator.
//
// The lines are parsed as the daemon parses them (worker/metrics_tail.h: keys named as
// ProgressReport's fields), so both paths send the same report.
//
// Thread safety: not thread-safe; the commit reporter's thread calls it.
#ifndef SHARDLINE_TRAINER_LOGGED_STEPS_H_
#define SHARDLINE_TRAINER_LOGGED_STEPS_H_

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "proto/coordinator.pb.h"

namespace shardline::trainer {

class LoggedSteps {
 public:
  // `max_pending`: reports kept between commits (the oldest are dropped past it).
  explicit LoggedSteps(std::string path, size_t max_pending = 100000)
      : path_(std::move(path)), max_pending_(max_pending) {}

  // The reports of logged steps <= `step` not yet acknowledged, in file order (reads the
  // lines completed since the last call first). With `wait_for_step`, first waits up to `wait`
  // for the line of `step` itself (the training thread writes it just after the save whose
  // commit asks). A missing file: none.
  std::vector<ProgressReport> UpTo(int64_t step, bool wait_for_step = false,
                                   absl::Duration wait = absl::Seconds(10));

  // The commit of `step` was taken: its reports and every older one are not sent again.
  void Acknowledge(int64_t step);

 private:
  void ReadNewLines();

  std::string path_;
  size_t max_pending_;
  int64_t offset_ = 0;
  std::deque<ProgressReport> pending_;
};

}  // namespace shardline::trainer

#endif  // SHARDLINE_TRAINER_LOGGED_STEPS_H_
