#include "coordinator/state/state_writer.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace shardline::coordinator {

StateWriter::StateWriter(std::unique_ptr<StateStore> store, absl::Duration retry_interval)
    : store_(std::move(store)), retry_interval_(retry_interval) {
  if (store_) thread_ = std::thread([this] { Run(); });
}

StateWriter::~StateWriter() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

StateWriter::Ticket StateWriter::Enqueue(std::function<absl::Status(StateStore*)> apply,
                                         bool drop_on_failure) {
  absl::MutexLock lock(&mu_);
  const Ticket t = next_++;
  if (!store_) {
    done_ = t;
    return t;
  }
  queue_.push_back(Write{t, drop_on_failure, std::move(apply)});
  return t;
}

StateWriter::Ticket StateWriter::PutJob(const JobRecord& job) {
  return Enqueue([job](StateStore* s) { return s->PutJob(job); }, false);
}

StateWriter::Ticket StateWriter::PutCheckpoint(const CheckpointRecord& checkpoint) {
  return Enqueue([checkpoint](StateStore* s) { return s->PutCheckpoint(checkpoint); }, false);
}

StateWriter::Ticket StateWriter::DeleteCheckpoint(const std::string& job_id, int64_t step) {
  return Enqueue([job_id, step](StateStore* s) { return s->DeleteCheckpoint(job_id, step); },
                 false);
}

StateWriter::Ticket StateWriter::DeleteJob(const std::string& job_id) {
  return Enqueue([job_id](StateStore* s) { return s->DeleteJob(job_id); }, false);
}

StateWriter::Ticket StateWriter::PutWorker(const WorkerInfo& worker) {
  return Enqueue([worker](StateStore* s) { return s->PutWorker(worker); }, false);
}

StateWriter::Ticket StateWriter::PutJobMetrics(const JobMetricsRecord& metrics) {
  return Enqueue([metrics](StateStore* s) { return s->PutJobMetrics(metrics); }, false);
}

StateWriter::Ticket StateWriter::PutWorkerCredential(const WorkerCredentialRecord& record) {
  return Enqueue([record](StateStore* s) { return s->PutWorkerCredential(record); }, false);
}

StateWriter::Ticket StateWriter::PutRendezvousValue(const std::string& ns, const std::string& key,
                                                    const std::string& value) {
  return EnqueueRendezvous(RendezvousWrite{false, ns, key, value});
}

StateWriter::Ticket StateWriter::DeleteRendezvousNamespace(const std::string& ns) {
  return EnqueueRendezvous(RendezvousWrite{true, ns, "", ""});
}

StateWriter::Ticket StateWriter::EnqueueRendezvous(RendezvousWrite write) {
  absl::MutexLock lock(&mu_);
  if (!store_) {
    done_ = next_++;
    return done_;
  }
  // The tail batch takes it unless Run is applying it right now (the head, without mu_).
  if (!queue_.empty() && queue_.back().rendezvous &&
      queue_.back().rendezvous->size() < kMaxRendezvousBatch &&
      !(applying_ && queue_.size() == 1)) {
    queue_.back().rendezvous->push_back(std::move(write));
    return queue_.back().ticket;
  }
  auto batch = std::make_shared<std::vector<RendezvousWrite>>();
  batch->push_back(std::move(write));
  const Ticket t = next_++;
  queue_.push_back(
      Write{t, false, [batch](StateStore* s) { return s->ApplyRendezvous(*batch); }, batch});
  return t;
}

absl::Status StateWriter::PutJobOrDrop(const JobRecord& job) {
  const Ticket t = Enqueue([job](StateStore* s) { return s->PutJob(job); }, true);
  absl::Status s = Wait(t);
  if (!s.ok()) {
    // Stuck behind another failed write (or stopping): withdraw it, so it is never applied
    // after the caller reported the failure. It is not the head: the head is the failed one.
    absl::MutexLock lock(&mu_);
    for (auto it = queue_.begin(); it != queue_.end(); ++it) {
      if (it->ticket == t && it != queue_.begin()) {
        queue_.erase(it);
        break;
      }
    }
  }
  return s;
}

absl::Status StateWriter::Wait(Ticket ticket) {
  absl::MutexLock lock(&mu_);
  auto settled = [&] {
    mu_.AssertHeld();
    return done_ >= ticket || (failing_ != 0 && failing_ <= ticket) || stop_;
  };
  mu_.Await(absl::Condition(&settled));
  if (dropped_.erase(ticket) > 0) {
    return absl::UnavailableError(absl::StrCat("the state store cannot be written: ", reason_));
  }
  if (done_ >= ticket) return absl::OkStatus();
  if (failing_ != 0) {
    return absl::UnavailableError(absl::StrCat("the state store cannot be written: ", reason_,
                                               " (the write is retried every ",
                                               absl::FormatDuration(retry_interval_), ")"));
  }
  return absl::UnavailableError("the coordinator is shutting down");
}

absl::Status StateWriter::WaitDurable(Ticket ticket, const std::string& what) {
  absl::Status s = Wait(ticket);
  if (s.ok()) return s;
  return absl::UnavailableError(
      absl::StrCat(what, " is not durable: ", s.message(),
                   "; the coordinator is read-only until the state store can be written again"));
}

absl::Status StateWriter::CheckWritable() const {
  absl::MutexLock lock(&mu_);
  if (failing_ == 0) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(
      "coordinator is read-only: the state store cannot be written (", reason_,
      "); reads keep working, changes are accepted again once the queued writes succeed "
      "(retried every ",
      absl::FormatDuration(retry_interval_), ")"));
}

StateWriter::Ticket StateWriter::last_ticket() const {
  absl::MutexLock lock(&mu_);
  return next_ - 1;
}

StateWriter::Ticket StateWriter::durable_ticket() const {
  absl::MutexLock lock(&mu_);
  return done_;
}

bool StateWriter::stuck() const {
  absl::MutexLock lock(&mu_);
  return failing_ != 0;
}

std::string StateWriter::read_only_reason() const {
  absl::MutexLock lock(&mu_);
  return reason_;
}

void StateWriter::Run() {
  absl::MutexLock lock(&mu_);
  while (true) {
    auto ready = [&] {
      mu_.AssertHeld();
      return !queue_.empty() || stop_;
    };
    mu_.Await(absl::Condition(&ready));
    if (queue_.empty()) return;  // stopping with nothing left
    Write& head = queue_.front();
    const Ticket ticket = head.ticket;
    auto apply = head.apply;
    applying_ = true;
    mu_.Unlock();
    const absl::Status s = apply(store_.get());  // no lock held: the I/O and its fsync
    mu_.Lock();
    applying_ = false;
    if (s.ok()) {
      if (failing_ != 0) {
        SL_LOG(INFO) << "state store writable again; coordinator read-write";
      }
      queue_.pop_front();
      done_ = ticket;
      failing_ = 0;
      reason_.clear();
      continue;
    }
    if (reason_.empty()) {
      SL_LOG(ERROR) << "state store write failed; coordinator read-only until it succeeds: " << s;
    }
    reason_ = std::string(s.message());
    if (queue_.front().drop_on_failure) {
      queue_.pop_front();
      dropped_.insert(ticket);
      done_ = ticket;
      continue;
    }
    failing_ = ticket;
    if (stop_) {
      SL_LOG(ERROR) << "coordinator stops with " << queue_.size() << " state writes not stored";
      return;
    }
    auto stopping = [&] {
      mu_.AssertHeld();
      return stop_;
    };
    mu_.AwaitWithTimeout(absl::Condition(&stopping), retry_interval_);
  }
}

}  // namespace shardline::coordinator
