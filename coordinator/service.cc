#include "coordinator/service.h"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/grpc_status.h"
#include "coordinator/core/job_state_machine.h"
#include "coordinator/rendezvous/rendezvous_store.h"
#include "coordinator/stream_hub.h"
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

namespace {
std::string WorkerKey(const std::string& id) { return "w:" + id; }
std::string JobKey(const std::string& id) { return "j:" + id; }
std::string NamespaceKey(const std::string& ns) { return "r:" + ns; }
std::string VoteKey(const std::string& job_id) { return "v:" + job_id; }

// A RendezvousGet waiting for keys: re-polled when its namespace changes, finished with
// DEADLINE_EXCEEDED when its wait runs out.
class PendingGet : public PendingUnaryCall {
 public:
  PendingGet(StreamHub* hub, CoordinatorCore* core, const RendezvousGetRequest& req,
             RendezvousGetResponse* resp, absl::Duration wait)
      : PendingUnaryCall(hub, NamespaceKey(req.namespace_()), absl::Now() + wait, "RendezvousGet"),
        core_(core),
        req_(req),
        resp_(resp),
        start_(absl::Now()) {}

 private:
  std::optional<grpc::Status> Poll(absl::Time now) override {
    auto r = core_->RendezvousPoll(req_, std::min(now, deadline()) - start_);
    if (r.ok()) {
      *resp_ = std::move(*r);
      return grpc::Status::OK;
    }
    if (r.status().code() != absl::StatusCode::kDeadlineExceeded || now >= deadline()) {
      return ToGrpcStatus(r.status());
    }
    return std::nullopt;
  }

  CoordinatorCore* core_;
  const RendezvousGetRequest req_;
  RendezvousGetResponse* resp_;
  const absl::Time start_;
};

// A StepVote waiting for its step's decision: re-polled when the job's votes change (a decision,
// the attempt's end), finished with DEADLINE_EXCEEDED ("send the vote again") at its deadline.
class PendingVote : public PendingUnaryCall {
 public:
  PendingVote(StreamHub* hub, CoordinatorCore* core, const StepVoteRequest& req,
              StepVoteResponse* resp, absl::Time deadline)
      : PendingUnaryCall(hub, VoteKey(req.job_id()), deadline, "StepVote"),
        core_(core),
        req_(req),
        resp_(resp) {}

 private:
  std::optional<grpc::Status> Poll(absl::Time now) override {
    if (std::optional<StepVoteResponse> answer = core_->StepVoteAnswer(req_)) {
      *resp_ = *std::move(answer);
      return grpc::Status::OK;
    }
    if (now >= deadline()) return ToGrpcStatus(CoordinatorCore::NoDecisionYet(req_));
    return std::nullopt;
  }

  CoordinatorCore* core_;
  const StepVoteRequest req_;
  StepVoteResponse* resp_;
};

}  // namespace

// Returns the authorization's status from an RPC method when it denies the call.
#define SL_RETURN_IF_DENIED(expr)                \
  do {                                           \
    grpc::Status auth_status_ = (expr);          \
    if (!auth_status_.ok()) return auth_status_; \
  } while (0)

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
      for (const std::string& v : dirty.votes) keys.push_back(VoteKey(v));
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

grpc::Status CoordinatorService::RegisterWorker(grpc::ServerContext* ctx,
                                                const RegisterWorkerRequest* req,
                                                RegisterWorkerResponse* resp) {
  SL_RETURN_IF_DENIED(AuthorizeDaemon(ctx, "RegisterWorker"));
  SL_RETURN_IF_DENIED(CheckNode(ctx, req->node_name()));
  auto r = core_->RegisterWorker(*req, PresentedWorkerCredential(ctx));
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
                                                ReportProgressResponse* resp) {
  AttemptIdentity caller;
  SL_RETURN_IF_DENIED(AuthorizeAttempt(ctx, "ReportProgress", &caller));
  SL_RETURN_IF_DENIED(CheckReportFor(caller, req->job_id(), req->attempt()));
  return ToGrpcStatus(core_->ReportProgress(*req, resp));
}

grpc::Status CoordinatorService::ReportCheckpoint(grpc::ServerContext* ctx,
                                                  const CheckpointReport* req,
                                                  ReportCheckpointResponse*) {
  AttemptIdentity caller;
  SL_RETURN_IF_DENIED(AuthorizeAttempt(ctx, "ReportCheckpoint", &caller));
  SL_RETURN_IF_DENIED(CheckReportFor(caller, req->job_id(), req->attempt()));
  return ToGrpcStatus(core_->ReportCheckpoint(*req));
}

grpc::ServerUnaryReactor* CoordinatorService::StepVote(grpc::CallbackServerContext* ctx,
                                                       const StepVoteRequest* req,
                                                       StepVoteResponse* resp) {
  auto finish = [ctx](const grpc::Status& status) {
    grpc::ServerUnaryReactor* r = ctx->DefaultReactor();
    r->Finish(status);
    return r;
  };
  AttemptIdentity caller;
  grpc::Status auth = AuthorizeAttempt(ctx, "StepVote", &caller);
  if (auth.ok()) auth = CheckReportFor(caller, req->job_id(), req->attempt());
  if (auth.ok() && shutdown_) auth = Unavailable();
  if (!auth.ok()) return finish(auth);
  absl::StatusOr<std::optional<StepVoteResponse>> cast = core_->CastStepVote(*req);
  if (!cast.ok()) return finish(ToGrpcStatus(cast.status()));
  if (cast->has_value()) {
    *resp = **std::move(cast);
    return finish(grpc::Status::OK);
  }
  // Waits at most kMaxStepVoteWait, and ends a little before the caller's own deadline.
  absl::Time deadline = absl::Now() + CoordinatorCore::kMaxStepVoteWait;
  if (ctx->deadline() != std::chrono::system_clock::time_point::max()) {
    deadline = std::min(deadline, absl::FromChrono(ctx->deadline()) - absl::Milliseconds(200));
  }
  auto* pending = new PendingVote(hub_.get(), core_, *req, resp, deadline);
  pending->Start();
  return pending;
}

grpc::Status CoordinatorService::SubmitJob(grpc::ServerContext* ctx, const SubmitJobRequest* req,
                                           SubmitJobResponse* resp) {
  User user;
  SL_RETURN_IF_DENIED(AuthorizeUser(ctx, "SubmitJob", &user));
  auto resolved = ResolveSubmittedSpec(*req);
  if (!resolved.ok()) return ToGrpcStatus(resolved.status());
  SL_RETURN_IF_DENIED(CheckCheckpointSources(user, *resolved));
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

}  // namespace shardline::coordinator
