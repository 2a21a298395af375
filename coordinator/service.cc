#include "coordinator/service.h"

#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "common/grpc_status.h"
#include "coordinator/job_state_machine.h"
#include "coordinator/rendezvous_store.h"

namespace shardline::coordinator {
namespace {

grpc::Status Unavailable() {
  return grpc::Status(grpc::StatusCode::UNAVAILABLE, "coordinator is shutting down");
}

}  // namespace

grpc::Status CoordinatorService::Authorize(const grpc::ServerContext* ctx, Role role) const {
  if (role == Role::kDaemon && options_.require_worker_client_cert) {
    auto auth = ctx->auth_context();
    if (auth == nullptr || !auth->IsPeerAuthenticated()) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          "worker calls need a client certificate signed by the coordinator's "
                          "client CA");
    }
  }
  if (role == Role::kDaemon) role = Role::kWorker;
  const std::string& expected =
      role == Role::kWorker && !options_.worker_token.empty() ? options_.worker_token
                                                              : options_.user_token;
  if (expected.empty()) return grpc::Status::OK;
  const auto& md = ctx->client_metadata();
  auto it = md.find("authorization");
  if (it == md.end()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "missing \"authorization: Bearer <token>\" metadata");
  }
  const absl::string_view value(it->second.data(), it->second.size());
  constexpr absl::string_view kPrefix = "Bearer ";
  if (!absl::StartsWith(value, kPrefix) ||
      !SecretEquals(value.substr(kPrefix.size()), expected)) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        role == Role::kWorker ? "wrong worker join token" : "wrong user token");
  }
  return grpc::Status::OK;
}

#define SL_AUTHORIZE(role)                                 \
  do {                                                     \
    grpc::Status auth_status_ = Authorize(ctx, role);      \
    if (!auth_status_.ok()) return auth_status_;           \
  } while (0)

grpc::Status CoordinatorService::RegisterWorker(grpc::ServerContext* ctx,
                                                const RegisterWorkerRequest* req,
                                                RegisterWorkerResponse* resp) {
  SL_AUTHORIZE(Role::kDaemon);
  auto r = core_->RegisterWorker(*req);
  if (!r.ok()) return ToGrpcStatus(r.status());
  *resp = std::move(*r);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::Heartbeat(grpc::ServerContext* ctx, const HeartbeatRequest* req,
                                           HeartbeatResponse* resp) {
  SL_AUTHORIZE(Role::kDaemon);
  auto r = core_->Heartbeat(*req);
  if (!r.ok()) return ToGrpcStatus(r.status());
  *resp = std::move(*r);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::StreamAssignments(grpc::ServerContext* ctx,
                                                   const StreamAssignmentsRequest* req,
                                                   grpc::ServerWriter<Assignment>* writer) {
  SL_AUTHORIZE(Role::kDaemon);
  auto gen = core_->OpenAssignmentStream(req->worker_id());
  if (!gen.ok()) return ToGrpcStatus(gen.status());
  Assignment a;
  while (!ctx->IsCancelled()) {
    if (shutdown_) return Unavailable();
    auto got = core_->NextAssignment(req->worker_id(), *gen, options_.poll, &a);
    if (!got.ok()) return ToGrpcStatus(got.status());
    if (*got && !writer->Write(a)) break;  // client gone; a new stream re-sends its STARTs
  }
  return grpc::Status(grpc::StatusCode::CANCELLED, "stream cancelled");
}

grpc::Status CoordinatorService::ListWorkers(grpc::ServerContext* ctx, const ListWorkersRequest*,
                                             ListWorkersResponse* resp) {
  SL_AUTHORIZE(Role::kUser);
  for (WorkerInfo& w : core_->ListWorkers()) *resp->add_workers() = std::move(w);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::RendezvousSet(grpc::ServerContext* ctx,
                                               const RendezvousSetRequest* req,
                                               RendezvousSetResponse*) {
  SL_AUTHORIZE(Role::kWorker);
  return ToGrpcStatus(core_->RendezvousSet(*req));
}

grpc::Status CoordinatorService::RendezvousGet(grpc::ServerContext* ctx,
                                               const RendezvousGetRequest* req,
                                               RendezvousGetResponse* resp) {
  SL_AUTHORIZE(Role::kWorker);
  auto r = core_->RendezvousGet(*req);
  if (!r.ok()) return ToGrpcStatus(r.status());
  *resp = std::move(*r);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::ReportProgress(grpc::ServerContext* ctx,
                                                const ProgressReport* req,
                                                ReportProgressResponse*) {
  SL_AUTHORIZE(Role::kWorker);
  return ToGrpcStatus(core_->ReportProgress(*req));
}

grpc::Status CoordinatorService::ReportCheckpoint(grpc::ServerContext* ctx,
                                                  const CheckpointReport* req,
                                                  ReportCheckpointResponse*) {
  SL_AUTHORIZE(Role::kWorker);
  return ToGrpcStatus(core_->ReportCheckpoint(*req));
}

grpc::Status CoordinatorService::SubmitJob(grpc::ServerContext* ctx, const SubmitJobRequest* req,
                                           SubmitJobResponse* resp) {
  SL_AUTHORIZE(Role::kUser);
  auto id = core_->SubmitJob(req->spec());
  if (!id.ok()) return ToGrpcStatus(id.status());
  resp->set_job_id(*id);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::GetJob(grpc::ServerContext* ctx, const GetJobRequest* req,
                                        JobStatus* resp) {
  SL_AUTHORIZE(Role::kUser);
  auto st = core_->GetJob(req->job_id());
  if (!st.ok()) return ToGrpcStatus(st.status());
  *resp = std::move(*st);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::ListJobs(grpc::ServerContext* ctx, const ListJobsRequest* req,
                                          ListJobsResponse* resp) {
  SL_AUTHORIZE(Role::kUser);
  std::vector<JobState> states;
  for (int s : req->states()) states.push_back(static_cast<JobState>(s));
  for (JobStatus& j : core_->ListJobs(states)) *resp->add_jobs() = std::move(j);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::CancelJob(grpc::ServerContext* ctx, const CancelJobRequest* req,
                                           CancelJobResponse*) {
  SL_AUTHORIZE(Role::kUser);
  return ToGrpcStatus(core_->CancelJob(req->job_id(), req->reason()));
}

grpc::Status CoordinatorService::WatchJob(grpc::ServerContext* ctx, const WatchJobRequest* req,
                                          grpc::ServerWriter<JobStatus>* writer) {
  SL_AUTHORIZE(Role::kUser);
  int64_t sent = 0;
  while (!ctx->IsCancelled()) {
    if (shutdown_) return Unavailable();
    int64_t version = 0;
    auto st = core_->WaitJob(req->job_id(), sent, options_.poll, &version);
    if (!st.ok()) return ToGrpcStatus(st.status());
    if (version <= sent) continue;
    if (!writer->Write(*st)) break;
    sent = version;
    if (IsTerminal(st->state())) return grpc::Status::OK;
  }
  return grpc::Status(grpc::StatusCode::CANCELLED, "stream cancelled");
}

grpc::Status CoordinatorService::ListCheckpoints(grpc::ServerContext* ctx,
                                                 const ListCheckpointsRequest* req,
                                                 ListCheckpointsResponse* resp) {
  SL_AUTHORIZE(Role::kUser);
  auto list = core_->ListCheckpoints(req->job_id());
  if (!list.ok()) return ToGrpcStatus(list.status());
  for (CheckpointInfo& c : *list) *resp->add_checkpoints() = std::move(c);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::GetCheckpoint(grpc::ServerContext* ctx,
                                               const GetCheckpointRequest* req,
                                               GetCheckpointResponse* resp) {
  SL_AUTHORIZE(Role::kUser);
  auto r = core_->GetCheckpoint(req->job_id(), req->step());
  if (!r.ok()) return ToGrpcStatus(r.status());
  *resp = std::move(*r);
  return grpc::Status::OK;
}

}  // namespace shardline::coordinator
