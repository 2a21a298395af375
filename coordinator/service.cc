#include "coordinator/service.h"

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "common/constant_time.h"
#include "common/grpc_status.h"
#include "coordinator/job_state_machine.h"
#include "coordinator/rendezvous_store.h"
#include "spec/job_spec.h"

namespace shardline::coordinator {
namespace {

grpc::Status Unavailable() {
  return grpc::Status(grpc::StatusCode::UNAVAILABLE, "coordinator is shutting down");
}

// A stream refused before it started (e.g. bad credentials).
template <typename Msg>
class RefusedStream : public grpc::ServerWriteReactor<Msg> {
 public:
  explicit RefusedStream(const grpc::Status& status) { this->Finish(status); }
  void OnDone() override { delete this; }
};

// The JobSpec a SubmitJobRequest stands for (see coordinator.proto): spec_text is resolved by
// spec/ exactly as shardctl resolves a file, except that the coordinator's own working directory
// never stands in for a missing base_dir and files are not checked (they live on the workers).
absl::StatusOr<JobSpec> ResolveSubmittedSpec(const SubmitJobRequest& req) {
  if (req.spec_text().empty()) {
    if (req.overrides_size() > 0 || !req.base_dir().empty()) {
      return absl::InvalidArgumentError(
          "overrides and base_dir apply to spec_text; send the spec as text to use them");
    }
    return req.spec();
  }
  if (req.has_spec()) {
    return absl::InvalidArgumentError("spec and spec_text are both set; send one of them");
  }
  spec::LoadOptions options;
  options.overrides.assign(req.overrides().begin(), req.overrides().end());
  options.base_dir = req.base_dir();
  options.relative_to_cwd = false;
  options.validate.check_files = false;
  return spec::LoadJobSpecText(req.spec_text(),
                               req.source().empty() ? "submitted spec" : req.source(), options);
}

}  // namespace

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

namespace {

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

std::string WorkerKey(const std::string& id) { return "w:" + id; }
std::string JobKey(const std::string& id) { return "j:" + id; }
std::string NamespaceKey(const std::string& ns) { return "r:" + ns; }

// A RendezvousGet waiting for keys: re-polled when its namespace changes, finished with
// DEADLINE_EXCEEDED when its wait runs out.
class PendingGet : public grpc::ServerUnaryReactor, public PumpedStreamBase {
 public:
  PendingGet(StreamHub* hub, CoordinatorCore* core, const RendezvousGetRequest& req,
             RendezvousGetResponse* resp, absl::Duration wait)
      : hub_(hub),
        core_(core),
        req_(req),
        resp_(resp),
        start_(absl::Now()),
        deadline_(start_ + wait) {}

  void Start() {
    hub_->Add(NamespaceKey(req_.namespace_()), this, deadline_);
    Pump();
  }
  void Pump() override {
    absl::MutexLock lock(&mu_);
    if (finished_) return;
    const absl::Time now = absl::Now();
    auto r = core_->RendezvousPoll(req_, std::min(now, deadline_) - start_);
    if (r.ok()) {
      *resp_ = std::move(*r);
      return FinishLocked(grpc::Status::OK);
    }
    if (r.status().code() != absl::StatusCode::kDeadlineExceeded || now >= deadline_) {
      return FinishLocked(ToGrpcStatus(r.status()));
    }
  }
  void Abort(const grpc::Status& status) override {
    absl::MutexLock lock(&mu_);
    FinishLocked(status);
  }
  void OnCancel() override {
    absl::MutexLock lock(&mu_);
    FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "RendezvousGet cancelled"));
  }
  void OnDone() override {
    hub_->Remove(NamespaceKey(req_.namespace_()), this);
    delete this;
  }

 private:
  void FinishLocked(const grpc::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_) return;
    finished_ = true;
    Finish(status);
  }

  StreamHub* hub_;
  CoordinatorCore* core_;
  const RendezvousGetRequest req_;
  RendezvousGetResponse* resp_;
  const absl::Time start_;
  const absl::Time deadline_;
  absl::Mutex mu_;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

CoordinatorService::CoordinatorService(CoordinatorCore* core, ServiceOptions options)
    : core_(core),
      options_(std::move(options)),
      users_(options_.users),
      worker_token_(options_.worker_token.empty() ? options_.user_token : options_.worker_token),
      hub_(std::make_unique<StreamHub>()) {
  if (users_ == nullptr) {
    auto table = UserTable::Create("", options_.user_token);  // cannot fail without a file
    users_ =
        table.ok() ? std::shared_ptr<UserTable>(std::move(*table)) : std::make_shared<UserTable>();
  }
  pump_ = std::thread([this] {
    absl::Time next_sweep = absl::Now() + options_.sweep;
    CoordinatorCore::Dirty dirty;
    std::vector<std::string> keys;
    while (!shutdown_) {
      const absl::Time wake = std::min(next_sweep, hub_->NextDeadline());
      const bool live =
          core_->WaitDirty(std::max(wake - absl::Now(), absl::ZeroDuration()), &dirty);
      if (!live || shutdown_) break;
      keys.clear();
      for (const std::string& w : dirty.workers) keys.push_back(WorkerKey(w));
      for (const std::string& j : dirty.jobs) keys.push_back(JobKey(j));
      for (const std::string& n : dirty.namespaces) keys.push_back(NamespaceKey(n));
      const absl::Time now = absl::Now();
      const bool sweep = now >= next_sweep;
      if (sweep) next_sweep = now + options_.sweep;
      hub_->Pump(keys, sweep);
      hub_->PumpExpired(now);
    }
  });
}

void CoordinatorService::Shutdown() {
  if (shutdown_.exchange(true)) return;
  core_->Shutdown();  // wakes the pump
  if (pump_.joinable()) pump_.join();
  hub_->AbortAll(Unavailable());
}

CoordinatorService::~CoordinatorService() {
  Shutdown();
  hub_->WaitEmpty(absl::Seconds(5));
}

namespace {

constexpr char kWorkerCredentialHeader[] = "x-shardline-worker-credential";

// The "authorization" metadata of a call: whether it was sent and its bearer token (empty for a
// value without the "Bearer " prefix).
struct Bearer {
  bool present = false;
  std::string token;
};

Bearer BearerOf(const grpc::ServerContextBase* ctx) {
  Bearer b;
  const auto& md = ctx->client_metadata();
  auto it = md.find("authorization");
  if (it == md.end()) return b;
  b.present = true;
  absl::string_view value(it->second.data(), it->second.size());
  if (absl::ConsumePrefix(&value, "Bearer ")) b.token = std::string(value);
  return b;
}

grpc::Status MissingBearer() {
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                      "missing \"authorization: Bearer <token>\" metadata");
}

// What an attempt credential may do, for a call it may not make.
grpc::Status AttemptMayNot(const AttemptIdentity& a, const char* method, const char* needs) {
  return grpc::Status(
      grpc::StatusCode::PERMISSION_DENIED,
      absl::StrCat(
          "an attempt credential (job ", a.job_id, " attempt ", a.attempt,
          ") may only call ReportProgress, ReportCheckpoint and StepVote for that attempt and "
          "RendezvousSet/RendezvousGet in its namespace ",
          a.rendezvous_namespace, "; ", method, " needs ", needs));
}

}  // namespace

grpc::Status CoordinatorService::AuthorizeUser(const grpc::ServerContextBase* ctx,
                                               const char* method, User* user) const {
  const Bearer b = BearerOf(ctx);
  if (b.present) {
    if (std::optional<User> u = users_->Find(b.token)) {
      *user = *u;
      return grpc::Status::OK;
    }
    if (std::optional<AttemptIdentity> a = core_->IdentifyAttempt(b.token)) {
      return AttemptMayNot(*a, method, "a user token");
    }
  }
  if (users_->empty()) {  // user authentication is off
    *user = User{"anonymous", true};
    return grpc::Status::OK;
  }
  if (!b.present) return MissingBearer();
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "wrong user token");
}

grpc::Status CoordinatorService::AuthorizeDaemon(const grpc::ServerContextBase* ctx,
                                                 const char* method) const {
  if (options_.require_worker_client_cert) {
    auto auth = ctx->auth_context();
    if (auth == nullptr || !auth->IsPeerAuthenticated()) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          "worker calls need a client certificate signed by the coordinator's "
                          "client CA");
    }
  }
  const Bearer b = BearerOf(ctx);
  if (b.present && !worker_token_.empty() && ConstantTimeEquals(b.token, worker_token_)) {
    return grpc::Status::OK;
  }
  if (b.present) {
    if (std::optional<AttemptIdentity> a = core_->IdentifyAttempt(b.token)) {
      return AttemptMayNot(*a, method, "the worker join token");
    }
  }
  if (worker_token_.empty()) return grpc::Status::OK;  // worker authentication is off
  if (!b.present) return MissingBearer();
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "wrong worker join token");
}

grpc::Status CoordinatorService::CheckWorkerCredential(const grpc::ServerContextBase* ctx,
                                                       const std::string& worker_id) const {
  const auto& md = ctx->client_metadata();
  auto it = md.find(kWorkerCredentialHeader);
  if (it == md.end()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        absl::StrCat("missing \"", kWorkerCredentialHeader,
                                     "\" metadata: send the worker_credential RegisterWorker "
                                     "returned"));
  }
  const absl::Status s = core_->CheckWorkerCredential(
      worker_id, absl::string_view(it->second.data(), it->second.size()));
  // An unknown id is the core's business (re-register / NOT_FOUND), not an identity question.
  if (absl::IsNotFound(s)) return grpc::Status::OK;
  return ToGrpcStatus(s);
}

grpc::Status CoordinatorService::AuthorizeAttempt(const grpc::ServerContextBase* ctx,
                                                  const char* method,
                                                  AttemptIdentity* attempt) const {
  const Bearer b = BearerOf(ctx);
  if (!b.present) {
    return grpc::Status(
        grpc::StatusCode::UNAUTHENTICATED,
        absl::StrCat("missing \"authorization: Bearer <attempt credential>\" metadata: ", method,
                     " needs the credential of a running job attempt (its trainers' "
                     "SHARDLINE_RDZV_SECRET)"));
  }
  std::optional<AttemptIdentity> a = core_->IdentifyAttempt(b.token);
  if (!a) {
    return grpc::Status(
        grpc::StatusCode::UNAUTHENTICATED,
        absl::StrCat(method,
                     " needs the credential of a running job attempt (its trainers' "
                     "SHARDLINE_RDZV_SECRET); the token sent is none (user and worker tokens are "
                     "not, and an attempt's stops working when the attempt ends)"));
  }
  *attempt = *std::move(a);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::CheckReportFor(const AttemptIdentity& caller,
                                                const std::string& job_id, int32_t attempt) {
  if (caller.job_id == job_id && caller.attempt == attempt) return grpc::Status::OK;
  return grpc::Status(
      grpc::StatusCode::PERMISSION_DENIED,
      absl::StrCat("the attempt credential of job ", caller.job_id, " attempt ", caller.attempt,
                   " may not report for job ", job_id, " attempt ", attempt));
}

grpc::Status CoordinatorService::CheckNamespaceFor(const AttemptIdentity& caller,
                                                   const std::string& ns) {
  if (caller.rendezvous_namespace == ns) return grpc::Status::OK;
  return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                      absl::StrCat("the attempt credential of job ", caller.job_id, " attempt ",
                                   caller.attempt, " may only use rendezvous namespace ",
                                   caller.rendezvous_namespace, ", not ", ns));
}

grpc::Status CoordinatorService::CheckOwner(const User& user, const std::string& job_id,
                                            const char* action) const {
  if (user.admin) return grpc::Status::OK;
  auto st = core_->GetJob(job_id);
  if (!st.ok()) return ToGrpcStatus(st.status());
  if (st->owner() == user.name) return grpc::Status::OK;
  return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                      absl::StrCat("job ", job_id, " is owned by ",
                                   st->owner().empty() ? "nobody recorded" : st->owner(),
                                   "; only its owner or an admin may ", action));
}

grpc::Status CoordinatorService::CheckNode(const grpc::ServerContextBase* ctx,
                                           const std::string& node_name) const {
  if (!options_.require_worker_client_cert) return grpc::Status::OK;
  auto auth = ctx->auth_context();
  if (auth != nullptr) {
    for (const grpc::string_ref& id : auth->GetPeerIdentity()) {
      if (absl::string_view(id.data(), id.size()) == node_name) return grpc::Status::OK;
    }
  }
  return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                      "the client certificate does not name node " + node_name);
}

grpc::Status CoordinatorService::CheckWorker(const grpc::ServerContextBase* ctx,
                                             const std::string& worker_id) const {
  if (!options_.require_worker_client_cert) return grpc::Status::OK;
  auto info = core_->GetWorker(worker_id);
  // An unknown id is the core's business (re-register / NOT_FOUND), not an identity question.
  if (!info.ok()) return grpc::Status::OK;
  return CheckNode(ctx, info->node_name());
}

#define SL_RETURN_IF_DENIED(expr)                \
  do {                                           \
    grpc::Status auth_status_ = (expr);          \
    if (!auth_status_.ok()) return auth_status_; \
  } while (0)

grpc::Status CoordinatorService::RegisterWorker(grpc::ServerContext* ctx,
                                                const RegisterWorkerRequest* req,
                                                RegisterWorkerResponse* resp) {
  SL_RETURN_IF_DENIED(AuthorizeDaemon(ctx, "RegisterWorker"));
  SL_RETURN_IF_DENIED(CheckNode(ctx, req->node_name()));
  auto r = core_->RegisterWorker(*req);
  if (!r.ok()) return ToGrpcStatus(r.status());
  *resp = std::move(*r);
  return grpc::Status::OK;
}

grpc::ServerUnaryReactor* CoordinatorService::Heartbeat(grpc::CallbackServerContext* ctx,
                                                        const HeartbeatRequest* req,
                                                        HeartbeatResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  grpc::Status status = AuthorizeDaemon(ctx, "Heartbeat");
  if (status.ok()) status = CheckWorker(ctx, req->worker_id());
  if (status.ok()) status = CheckWorkerCredential(ctx, req->worker_id());
  if (status.ok()) {
    auto r = core_->Heartbeat(*req);  // never blocks beyond the core's short locks
    if (r.ok()) {
      *resp = std::move(*r);
    } else {
      status = ToGrpcStatus(r.status());
    }
  }
  reactor->Finish(status);
  return reactor;
}

grpc::ServerWriteReactor<Assignment>* CoordinatorService::StreamAssignments(
    grpc::CallbackServerContext* ctx, const StreamAssignmentsRequest* req) {
  grpc::Status auth = AuthorizeDaemon(ctx, "StreamAssignments");
  if (auth.ok()) auth = CheckWorker(ctx, req->worker_id());
  if (auth.ok()) auth = CheckWorkerCredential(ctx, req->worker_id());
  if (!auth.ok()) return new RefusedStream<Assignment>(auth);
  if (shutdown_) return new RefusedStream<Assignment>(Unavailable());
  const std::string worker_id = req->worker_id();
  auto gen = core_->OpenAssignmentStream(worker_id);
  if (!gen.ok()) return new RefusedStream<Assignment>(ToGrpcStatus(gen.status()));
  CoordinatorCore* core = core_;
  const int64_t generation = *gen;
  auto* stream = new PumpedStream<Assignment>(
      hub_.get(), WorkerKey(worker_id),
      [core, worker_id, generation](bool*) -> absl::StatusOr<std::optional<Assignment>> {
        Assignment a;
        auto got = core->NextAssignment(worker_id, generation, absl::ZeroDuration(), &a);
        if (!got.ok()) return got.status();
        if (!*got) return std::optional<Assignment>();
        return std::optional<Assignment>(std::move(a));
      });
  stream->Start();
  return stream;
}

grpc::Status CoordinatorService::ListWorkers(grpc::ServerContext* ctx, const ListWorkersRequest*,
                                             ListWorkersResponse* resp) {
  User user;
  SL_RETURN_IF_DENIED(AuthorizeUser(ctx, "ListWorkers", &user));
  for (WorkerInfo& w : core_->ListWorkers()) *resp->add_workers() = std::move(w);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::RendezvousSet(grpc::ServerContext* ctx,
                                               const RendezvousSetRequest* req,
                                               RendezvousSetResponse*) {
  AttemptIdentity caller;
  SL_RETURN_IF_DENIED(AuthorizeAttempt(ctx, "RendezvousSet", &caller));
  SL_RETURN_IF_DENIED(CheckNamespaceFor(caller, req->namespace_()));
  return ToGrpcStatus(core_->RendezvousSet(*req));
}

grpc::ServerUnaryReactor* CoordinatorService::RendezvousGet(grpc::CallbackServerContext* ctx,
                                                            const RendezvousGetRequest* req,
                                                            RendezvousGetResponse* resp) {
  AttemptIdentity caller;
  grpc::Status auth = AuthorizeAttempt(ctx, "RendezvousGet", &caller);
  if (auth.ok()) auth = CheckNamespaceFor(caller, req->namespace_());
  if (auth.ok() && shutdown_) auth = Unavailable();
  if (auth.ok() && req->timeout_ms() < 0) {
    auth = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "timeout_ms: must be >= 0, got " + std::to_string(req->timeout_ms()));
  }
  if (!auth.ok()) {
    grpc::ServerUnaryReactor* r = ctx->DefaultReactor();
    r->Finish(auth);
    return r;
  }
  auto* pending = new PendingGet(hub_.get(), core_, *req, resp, core_->RendezvousWait(*req));
  pending->Start();
  return pending;
}

grpc::Status CoordinatorService::ReportProgress(grpc::ServerContext* ctx, const ProgressReport* req,
                                                ReportProgressResponse*) {
  AttemptIdentity caller;
  SL_RETURN_IF_DENIED(AuthorizeAttempt(ctx, "ReportProgress", &caller));
  SL_RETURN_IF_DENIED(CheckReportFor(caller, req->job_id(), req->attempt()));
  return ToGrpcStatus(core_->ReportProgress(*req));
}

grpc::Status CoordinatorService::ReportCheckpoint(grpc::ServerContext* ctx,
                                                  const CheckpointReport* req,
                                                  ReportCheckpointResponse*) {
  AttemptIdentity caller;
  SL_RETURN_IF_DENIED(AuthorizeAttempt(ctx, "ReportCheckpoint", &caller));
  SL_RETURN_IF_DENIED(CheckReportFor(caller, req->job_id(), req->attempt()));
  return ToGrpcStatus(core_->ReportCheckpoint(*req));
}

grpc::Status CoordinatorService::StepVote(grpc::ServerContext* ctx, const StepVoteRequest* req,
                                          StepVoteResponse* resp) {
  AttemptIdentity caller;
  SL_RETURN_IF_DENIED(AuthorizeAttempt(ctx, "StepVote", &caller));
  SL_RETURN_IF_DENIED(CheckReportFor(caller, req->job_id(), req->attempt()));
  // The vote waits for the step's decision on this thread, at most kMaxStepVoteWait, and ends
  // a little before the caller's own deadline (DEADLINE_EXCEEDED "no decision yet": re-send).
  absl::Duration wait = CoordinatorCore::kMaxStepVoteWait;
  const auto deadline = ctx->deadline();
  if (deadline != std::chrono::system_clock::time_point::max()) {
    wait = std::min(wait, std::max(absl::ZeroDuration(), absl::FromChrono(deadline) - absl::Now() -
                                                             absl::Milliseconds(200)));
  }
  auto decided = core_->StepVote(*req, wait);
  if (!decided.ok()) return ToGrpcStatus(decided.status());
  *resp = *std::move(decided);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::SubmitJob(grpc::ServerContext* ctx, const SubmitJobRequest* req,
                                           SubmitJobResponse* resp) {
  User user;
  SL_RETURN_IF_DENIED(AuthorizeUser(ctx, "SubmitJob", &user));
  auto resolved = ResolveSubmittedSpec(*req);
  if (!resolved.ok()) return ToGrpcStatus(resolved.status());
  auto id = core_->SubmitJob(*resolved, user.name);
  if (!id.ok()) return ToGrpcStatus(id.status());
  resp->set_job_id(*id);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::GetJob(grpc::ServerContext* ctx, const GetJobRequest* req,
                                        JobStatus* resp) {
  User user;
  SL_RETURN_IF_DENIED(AuthorizeUser(ctx, "GetJob", &user));
  auto st = core_->GetJob(req->job_id());
  if (!st.ok()) return ToGrpcStatus(st.status());
  *resp = std::move(*st);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::ListJobs(grpc::ServerContext* ctx, const ListJobsRequest* req,
                                          ListJobsResponse* resp) {
  User user;
  SL_RETURN_IF_DENIED(AuthorizeUser(ctx, "ListJobs", &user));
  absl::StatusOr<ListJobsResponse> page = core_->ListJobsPage(*req);
  if (!page.ok()) return ToGrpcStatus(page.status());
  *resp = std::move(*page);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::CancelJob(grpc::ServerContext* ctx, const CancelJobRequest* req,
                                           CancelJobResponse*) {
  User user;
  SL_RETURN_IF_DENIED(AuthorizeUser(ctx, "CancelJob", &user));
  SL_RETURN_IF_DENIED(CheckOwner(user, req->job_id(), "cancel it"));
  return ToGrpcStatus(core_->CancelJob(req->job_id(), req->reason()));
}

grpc::ServerWriteReactor<JobStatus>* CoordinatorService::WatchJob(grpc::CallbackServerContext* ctx,
                                                                  const WatchJobRequest* req) {
  User user;
  if (grpc::Status auth = AuthorizeUser(ctx, "WatchJob", &user); !auth.ok()) {
    return new RefusedStream<JobStatus>(auth);
  }
  if (shutdown_) return new RefusedStream<JobStatus>(Unavailable());
  const std::string job_id = req->job_id();
  CoordinatorCore* core = core_;
  auto sent = std::make_shared<int64_t>(0);  // version last written
  auto* stream = new PumpedStream<JobStatus>(
      hub_.get(), JobKey(job_id),
      [core, job_id, sent](bool* last) -> absl::StatusOr<std::optional<JobStatus>> {
        int64_t version = 0;
        auto st = core->JobIfNewer(job_id, *sent, &version);
        if (!st.ok()) return st.status();
        if (!st->has_value()) return std::optional<JobStatus>();
        *sent = version;
        *last = IsTerminal((*st)->state());
        return st;
      });
  stream->Start();
  return stream;
}

grpc::Status CoordinatorService::ListCheckpoints(grpc::ServerContext* ctx,
                                                 const ListCheckpointsRequest* req,
                                                 ListCheckpointsResponse* resp) {
  User user;
  SL_RETURN_IF_DENIED(AuthorizeUser(ctx, "ListCheckpoints", &user));
  SL_RETURN_IF_DENIED(CheckOwner(user, req->job_id(), "list its checkpoints"));
  auto list = core_->ListCheckpoints(req->job_id());
  if (!list.ok()) return ToGrpcStatus(list.status());
  for (CheckpointInfo& c : *list) *resp->add_checkpoints() = std::move(c);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::GetCheckpoint(grpc::ServerContext* ctx,
                                               const GetCheckpointRequest* req,
                                               GetCheckpointResponse* resp) {
  User user;
  SL_RETURN_IF_DENIED(AuthorizeUser(ctx, "GetCheckpoint", &user));
  SL_RETURN_IF_DENIED(CheckOwner(user, req->job_id(), "read its checkpoints"));
  auto r = core_->GetCheckpoint(req->job_id(), req->step());
  if (!r.ok()) return ToGrpcStatus(r.status());
  *resp = std::move(*r);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::ShipLogs(grpc::ServerContext* ctx, const ShipLogsRequest* req,
                                          ShipLogsResponse*) {
  grpc::Status status = AuthorizeDaemon(ctx, "ShipLogs");
  if (status.ok()) status = CheckWorker(ctx, req->worker_id());
  if (status.ok()) status = CheckWorkerCredential(ctx, req->worker_id());
  if (!status.ok()) return status;
  return ToGrpcStatus(core_->ShipLogs(*req));
}

grpc::Status CoordinatorService::GetLogs(grpc::ServerContext* ctx, const GetLogsRequest* req,
                                         GetLogsResponse* resp) {
  User user;
  SL_RETURN_IF_DENIED(AuthorizeUser(ctx, "GetLogs", &user));
  SL_RETURN_IF_DENIED(CheckOwner(user, req->job_id(), "read its logs"));
  auto r = core_->GetLogs(*req);
  if (!r.ok()) return ToGrpcStatus(r.status());
  *resp = std::move(*r);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::GetJobMetrics(grpc::ServerContext* ctx,
                                               const GetJobMetricsRequest* req,
                                               GetJobMetricsResponse* resp) {
  User user;
  SL_RETURN_IF_DENIED(AuthorizeUser(ctx, "GetJobMetrics", &user));
  SL_RETURN_IF_DENIED(CheckOwner(user, req->job_id(), "read its metrics"));
  auto r = core_->GetJobMetrics(*req);
  if (!r.ok()) return ToGrpcStatus(r.status());
  *resp = std::move(*r);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::WhoAmI(grpc::ServerContext* ctx, const WhoAmIRequest*,
                                        WhoAmIResponse* resp) {
  const Bearer b = BearerOf(ctx);
  if (b.present) {
    if (std::optional<User> u = users_->Find(b.token)) {
      resp->set_user(u->name);
      resp->set_admin(u->admin);
      resp->set_credential("user token");
      return grpc::Status::OK;
    }
    if (!worker_token_.empty() && ConstantTimeEquals(b.token, worker_token_)) {
      resp->set_credential("worker join token");
      return grpc::Status::OK;
    }
    if (std::optional<AttemptIdentity> a = core_->IdentifyAttempt(b.token)) {
      resp->set_credential("attempt credential");
      resp->set_job_id(a->job_id);
      resp->set_attempt(a->attempt);
      return grpc::Status::OK;
    }
  }
  if (users_->empty()) {
    resp->set_user("anonymous");
    resp->set_admin(true);
    resp->set_credential("none");
    return grpc::Status::OK;
  }
  if (!b.present) return MissingBearer();
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                      "wrong token: no user's, not the worker join token, and no running job "
                      "attempt's credential");
}

}  // namespace shardline::coordinator
