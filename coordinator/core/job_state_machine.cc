#include "coordinator/core/job_state_machine.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace shardline::coordinator {

bool IsTerminal(JobState state) {
  return state == SUCCEEDED || state == FAILED || state == CANCELLED;
}

bool IsLegalTransition(JobState from, JobState to) {
  switch (from) {
    case PENDING:
      return to == RUNNING || to == FAILED || to == CANCELLED;
    case RUNNING:
      return to == PENDING || to == SUCCEEDED || to == FAILED || to == CANCELLED;
    default:
      return false;
  }
}

void JobStateMachine::Note(absl::string_view kind, absl::string_view message) {
  JobEvent* e = rec_->mutable_status()->add_events();
  e->set_time_unix_ms(absl::ToUnixMillis(now_));
  e->set_attempt(rec_->status().attempt());
  e->set_kind(std::string(kind));
  e->set_message(std::string(message));
}

absl::Status JobStateMachine::Move(JobState to, absl::string_view kind, absl::string_view reason) {
  JobStatus* st = rec_->mutable_status();
  if (!IsLegalTransition(st->state(), to)) {
    return absl::FailedPreconditionError(absl::StrCat("job ", st->job_id(), ": illegal transition ",
                                                      JobState_Name(st->state()), " -> ",
                                                      JobState_Name(to)));
  }
  st->set_state(to);
  if (IsTerminal(to)) {
    st->set_finished_unix_ms(absl::ToUnixMillis(now_));
    st->clear_placement();
  }
  Note(kind, reason);
  return absl::OkStatus();
}

absl::Status JobStateMachine::Submit() {
  JobStatus* st = rec_->mutable_status();
  if (st->state() != JOB_STATE_UNSPECIFIED) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", st->job_id(), ": already submitted (state ", JobState_Name(st->state()), ")"));
  }
  st->set_state(PENDING);
  st->set_submitted_unix_ms(absl::ToUnixMillis(now_));
  Note("SUBMITTED",
       absl::StrCat("world_size ", st->spec().world_size(), ", priority ", st->spec().priority()));
  return absl::OkStatus();
}

absl::Status JobStateMachine::Start(int32_t world_size, absl::string_view reason) {
  JobStatus* st = rec_->mutable_status();
  if (!IsLegalTransition(st->state(), RUNNING)) return Move(RUNNING, "", "");
  st->set_attempt(st->attempt() + 1);
  st->set_world_size(world_size);
  st->set_started_unix_ms(absl::ToUnixMillis(now_));
  st->clear_message();
  rec_->clear_succeeded_ranks();
  return Move(RUNNING, "SCHEDULED", reason);
}

absl::Status JobStateMachine::Succeed(absl::string_view reason) {
  return Move(SUCCEEDED, "SUCCEEDED", reason);
}

absl::StatusOr<bool> JobStateMachine::FailAttempt(absl::string_view kind, absl::string_view reason,
                                                  bool restartable) {
  JobStatus* st = rec_->mutable_status();
  if (st->state() != RUNNING) {
    return absl::FailedPreconditionError(absl::StrCat("job ", st->job_id(), ": illegal transition ",
                                                      JobState_Name(st->state()),
                                                      " -> attempt failed"));
  }
  Note(kind, reason);
  const int32_t max_restarts = st->spec().restart().max_restarts();
  if (!restartable) {
    st->set_message(std::string(reason));
    absl::Status s =
        Move(FAILED, "FAILED",
             absl::StrCat("attempt ", st->attempt(), " failed (", kind,
                          "); not restarted, a new attempt would fail the same way: ", reason));
    if (!s.ok()) return s;
    return false;
  }
  if (rec_->restarts() < max_restarts) {
    rec_->set_restarts(rec_->restarts() + 1);
    const int32_t backoff_s = st->spec().restart().backoff_s();
    rec_->set_restart_not_before_unix_ms(absl::ToUnixMillis(now_ + absl::Seconds(backoff_s)));
    st->clear_placement();
    st->set_message(std::string(reason));
    const std::string why = absl::StrCat("restart ", rec_->restarts(), " of ", max_restarts,
                                         " after ", kind, "; from checkpoint step ",
                                         st->latest_checkpoint_step(), " after ", backoff_s, "s");
    absl::Status s = Move(PENDING, "RESTARTING", why);
    if (!s.ok()) return s;
    return true;
  }
  st->set_message(std::string(reason));
  absl::Status s =
      Move(FAILED, "FAILED",
           absl::StrCat("attempt ", st->attempt(), " failed and restarts are used up (",
                        rec_->restarts(), " of ", max_restarts, "): ", reason));
  if (!s.ok()) return s;
  return false;
}

absl::Status JobStateMachine::Requeue(absl::string_view kind, absl::string_view reason) {
  JobStatus* st = rec_->mutable_status();
  if (st->state() != RUNNING) {
    return absl::FailedPreconditionError(absl::StrCat("job ", st->job_id(), ": illegal transition ",
                                                      JobState_Name(st->state()), " -> requeue"));
  }
  rec_->set_restart_not_before_unix_ms(absl::ToUnixMillis(now_));
  rec_->clear_preempted_for();
  rec_->clear_preempt_requested_unix_ms();
  rec_->clear_preempt_saved_step();
  st->clear_placement();
  st->set_message(std::string(reason));
  return Move(PENDING, kind, reason);
}

absl::Status JobStateMachine::Fail(absl::string_view reason) {
  JobState from = rec_->status().state();
  if (!IsLegalTransition(from, FAILED)) return Move(FAILED, "", "");
  rec_->mutable_status()->set_message(std::string(reason));
  return Move(FAILED, "FAILED", reason);
}

absl::Status JobStateMachine::Cancel(absl::string_view reason) {
  JobState from = rec_->status().state();
  if (!IsLegalTransition(from, CANCELLED)) return Move(CANCELLED, "", "");
  rec_->mutable_status()->set_message(std::string(reason));
  return Move(CANCELLED, "CANCELLED", reason);
}

}  // namespace shardline::coordinator
