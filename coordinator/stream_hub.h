// The coordinator's open server calls that wait on state: WatchJob and StreamAssignments streams
// and waiting RendezvousGet calls. Each registers under a key (a worker, a job, a rendezvous
// namespace) with a StreamHub; when the coordinator's state under a key changes, the hub pumps
// that key's calls, and each call writes what is new (or finishes). PumpedStream is the generic
// server-streaming call whose messages come from a `next` function.
//
// PendingUnaryCall is the same for a unary call that waits (RendezvousGet, StepVote).
//
// Thread safety: StreamHub is thread-safe. A PumpedStream or PendingUnaryCall is driven by
// gRPC's reaction threads and the hub's pumps, serialised by its own mutex.
#ifndef SHARDLINE_COORDINATOR_STREAM_HUB_H_
#define SHARDLINE_COORDINATOR_STREAM_HUB_H_

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/grpc_status.h"

namespace shardline::coordinator {

// One open server stream whose messages come from a `next` function. Pump() writes the next
// message when no write is in flight; the hub pumps a stream whenever its key (worker or job)
// changed. gRPC runs reactions (OnWriteDone, OnCancel, OnDone) on its own threads, never inside
// StartWrite/Finish, so those may be called under mu_.
class PumpedStreamBase {
 public:
  virtual ~PumpedStreamBase() = default;
  virtual void Pump() = 0;
  virtual void Abort(const grpc::Status& status) = 0;
};

// A time after which some call must be pumped even without a change (rendezvous timeouts).
using Deadline = std::pair<absl::Time, PumpedStreamBase*>;

class StreamHub {
 public:
  void Add(const std::string& key, PumpedStreamBase* s,
           absl::Time deadline = absl::InfiniteFuture()) {
    absl::MutexLock lock(&mu_);
    streams_[key].insert(s);
    if (deadline != absl::InfiniteFuture()) {
      deadlines_.insert({deadline, s});
      deadline_of_[s] = deadline;
    }
  }
  void Remove(const std::string& key, PumpedStreamBase* s) {
    absl::MutexLock lock(&mu_);
    if (auto d = deadline_of_.find(s); d != deadline_of_.end()) {
      deadlines_.erase({d->second, s});
      deadline_of_.erase(d);
    }
    auto it = streams_.find(key);
    if (it == streams_.end()) return;
    it->second.erase(s);
    if (it->second.empty()) streams_.erase(it);
  }
  // Pumps the streams of `keys` (all streams when `all`). The hub lock is held while one key's
  // streams are pumped, so a stream cannot finish its OnDone (and be deleted) meanwhile; it is
  // released between keys so that opening and closing streams never waits for a whole sweep.
  void Pump(const std::vector<std::string>& keys, bool all) {
    std::vector<std::string> all_keys;
    if (all) {
      absl::MutexLock lock(&mu_);
      for (const auto& [key, set] : streams_) all_keys.push_back(key);
    }
    for (const std::string& key : all ? all_keys : keys) {
      absl::MutexLock lock(&mu_);
      auto it = streams_.find(key);
      if (it == streams_.end()) continue;
      for (PumpedStreamBase* s : it->second) s->Pump();
    }
  }
  // The earliest deadline of a waiting call (InfiniteFuture when none).
  absl::Time NextDeadline() {
    absl::MutexLock lock(&mu_);
    return deadlines_.empty() ? absl::InfiniteFuture() : deadlines_.begin()->first;
  }
  // Pumps every call whose deadline passed (each finishes then) and forgets those deadlines,
  // so the pump does not wake for them again before their OnDone runs.
  void PumpExpired(absl::Time now) {
    absl::MutexLock lock(&mu_);
    while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
      PumpedStreamBase* s = deadlines_.begin()->second;
      deadlines_.erase(deadlines_.begin());
      deadline_of_.erase(s);
      s->Pump();
    }
  }
  void AbortAll(const grpc::Status& status) {
    absl::MutexLock lock(&mu_);
    for (auto& [key, set] : streams_) {
      for (PumpedStreamBase* s : set) s->Abort(status);
    }
  }
  // Waits until every stream finished (OnDone ran), up to `timeout`.
  void WaitEmpty(absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto empty = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return streams_.empty(); };
    mu_.AwaitWithTimeout(absl::Condition(&empty), timeout);
  }

 private:
  absl::Mutex mu_;
  std::map<std::string, std::set<PumpedStreamBase*>> streams_ ABSL_GUARDED_BY(mu_);
  std::set<Deadline> deadlines_ ABSL_GUARDED_BY(mu_);
  std::map<PumpedStreamBase*, absl::Time> deadline_of_ ABSL_GUARDED_BY(mu_);
};

template <typename Msg>
class PumpedStream : public grpc::ServerWriteReactor<Msg>, public PumpedStreamBase {
 public:
  // Returns the next message (nullopt: nothing yet) or the status to finish with; sets *last
  // when the stream ends OK after this message.
  using NextFn = std::function<absl::StatusOr<std::optional<Msg>>(bool* last)>;

  PumpedStream(StreamHub* hub, std::string key, NextFn next)
      : hub_(hub), key_(std::move(key)), next_(std::move(next)) {}

  // Registers with the hub and sends what is ready. Call once, from the RPC method.
  void Start() {
    hub_->Add(key_, this);
    Pump();
  }

  void Pump() override {
    absl::MutexLock lock(&mu_);
    if (finished_ || writing_) return;
    if (cancelled_) return FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
    if (last_sent_) return FinishLocked(grpc::Status::OK);
    bool last = false;
    absl::StatusOr<std::optional<Msg>> next = next_(&last);
    if (!next.ok()) return FinishLocked(ToGrpcStatus(next.status()));
    if (!next->has_value()) return;
    current_ = std::move(**next);
    last_sent_ = last;
    writing_ = true;
    this->StartWrite(&current_);
  }

  void Abort(const grpc::Status& status) override {
    absl::MutexLock lock(&mu_);
    if (!writing_) FinishLocked(status);
    abort_ = status;
    aborted_ = true;
  }

  void OnWriteDone(bool ok) override {
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      if (!ok) return FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "write failed"));
      if (aborted_) return FinishLocked(abort_);
    }
    Pump();
  }

  void OnCancel() override {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
    if (!writing_) FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "stream cancelled"));
  }

  void OnDone() override {
    hub_->Remove(key_, this);
    delete this;
  }

 private:
  void FinishLocked(const grpc::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_) return;
    finished_ = true;
    this->Finish(status);
  }

  StreamHub* hub_;
  const std::string key_;
  NextFn next_;
  absl::Mutex mu_;
  Msg current_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool last_sent_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool aborted_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status abort_ ABSL_GUARDED_BY(mu_);
};

// A unary call (callback API) that waits on the coordinator's state without holding a thread:
// registered under `key` with the hub until it finishes, polled when it starts (after the
// registration, so a change made just before is seen), whenever its key changes, and at its
// deadline. Subclasses fill the response in Poll and say whether the call can finish now.
class PendingUnaryCall : public grpc::ServerUnaryReactor, public PumpedStreamBase {
 public:
  // `what` names the method in the CANCELLED status of a call its client gave up.
  PendingUnaryCall(StreamHub* hub, std::string key, absl::Time deadline, std::string what)
      : hub_(hub), key_(std::move(key)), deadline_(deadline), what_(std::move(what)) {}

  // Call once, from the RPC method, and return the call to gRPC.
  void Start() {
    hub_->Add(key_, this, deadline_);
    Pump();
  }
  void Pump() override {
    absl::MutexLock lock(&mu_);
    if (finished_) return;
    if (std::optional<grpc::Status> done = Poll(absl::Now())) FinishLocked(*done);
  }
  void Abort(const grpc::Status& status) override {
    absl::MutexLock lock(&mu_);
    FinishLocked(status);
  }
  void OnCancel() override {
    absl::MutexLock lock(&mu_);
    FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, what_ + " cancelled"));
  }
  void OnDone() override {
    hub_->Remove(key_, this);
    delete this;
  }

 protected:
  absl::Time deadline() const { return deadline_; }

 private:
  // Under the call's lock, never after it finished: the status to finish with (the response
  // filled for OK), or nullopt to wait on. Must finish once `now` reaches the deadline.
  virtual std::optional<grpc::Status> Poll(absl::Time now) = 0;

  void FinishLocked(const grpc::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_) return;
    finished_ = true;
    Finish(status);
  }

  StreamHub* const hub_;
  const std::string key_;
  const absl::Time deadline_;
  const std::string what_;
  absl::Mutex mu_;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace shardline::coordinator

#endif  // SHARDLINE_COORDINATOR_STREAM_HUB_H_
