// CoordinatorService: the gRPC face of CoordinatorCore. Each method checks credentials, converts
// the request, calls the core and converts the status (common/grpc_status.h); nothing else.
//
// Credentials (docs/security.md has the table). Every call carries "authorization: Bearer <token>":
//   - user methods (SubmitJob, GetJob, ListJobs, CancelJob, WatchJob, ListWorkers,
//     ListCheckpoints, GetCheckpoint, GetLogs, GetJobMetrics) need a user's token (UserTable:
//     --users_file, and the legacy --token as admin "admin"). Listing and watching are open to
//     every user; CancelJob, ListCheckpoints, GetCheckpoint, GetLogs and GetJobMetrics only to the
//     job's owner or an admin (PERMISSION_DENIED "job <id> is owned by <owner>; only its owner or
//     an admin may <action>"). With no users, user authentication is off and every caller is
//     "anonymous", an admin.
//   - daemon methods (RegisterWorker, Heartbeat, StreamAssignments, ShipLogs) need the worker join
//   token
//     (the user token when no worker token is configured: CoordinatorServer allows that on
//     loopback only); Heartbeat, StreamAssignments and ShipLogs also need the worker's own
//     credential from RegisterWorker as "x-shardline-worker-credential" metadata (UNAUTHENTICATED
//     when missing, PERMISSION_DENIED "worker credential does not match worker <id>" when it is
//     another worker's or outdated).
//   - attempt methods (ReportProgress, ReportCheckpoint, StepVote, RendezvousSet/Get) need the
//     credential of a running job attempt (its rendezvous secret, which its trainers get): a
//     report or vote only for that job and attempt, rendezvous only in its namespace
//     (PERMISSION_DENIED otherwise);
//     any other token, or none, is UNAUTHENTICATED. These checks hold with or without tokens.
//   - an attempt credential sent to any other method is PERMISSION_DENIED naming what it may do.
//   - WhoAmI answers for any valid credential.
// A refused call gets its code before the core changes anything.
//
// The long-lived calls (StreamAssignments, WatchJob, and RendezvousGet, which may wait for keys)
// use gRPC's callback API, so a waiting call holds no thread (one per connected worker or
// bootstrapping rank would not scale to thousands): one pump thread waits for the core's change
// notifications (CoordinatorCore::WaitDirty) and the nearest rendezvous deadline, and serves
// the calls whose worker, job or namespace changed. Other unary methods use the synchronous API.
//
// Thread safety: gRPC calls the methods from many threads; the core is thread-safe.
#ifndef SHARDLINE_COORDINATOR_SERVICE_H_
#define SHARDLINE_COORDINATOR_SERVICE_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "absl/time/time.h"
#include "coordinator/auth/user_table.h"
#include "coordinator/core/coordinator_core.h"
#include "proto/coordinator.grpc.pb.h"

namespace shardline::coordinator {

struct ServiceOptions {
  // The users; null: a table with the one admin user "admin" holding user_token (none when
  // user_token is empty). The server reloads the table it passes.
  std::shared_ptr<UserTable> users;
  std::string user_token;
  // Empty: the daemon methods take the user token (loopback only; see CoordinatorServer).
  std::string worker_token;
  // Mutual TLS for workers: RegisterWorker, Heartbeat and StreamAssignments also need a client
  // certificate the server verified, naming the worker's node (its subject alternative names or
  // common name must include node_name), so one node cannot act for another.
  bool require_worker_client_cert = false;
  // How often the pump re-checks every stream even without notifications (a safety net).
  absl::Duration sweep = absl::Seconds(5);
};

class StreamHub;  // stream_hub.h

using CoordinatorServiceBase = ::shardline::Coordinator::WithCallbackMethod_StreamAssignments<
    ::shardline::Coordinator::WithCallbackMethod_WatchJob<
        ::shardline::Coordinator::WithCallbackMethod_RendezvousGet<
            ::shardline::Coordinator::WithCallbackMethod_Heartbeat<
                ::shardline::Coordinator::WithCallbackMethod_StepVote<
                    ::shardline::Coordinator::Service>>>>>;

class CoordinatorService final : public CoordinatorServiceBase {
 public:
  // `core` must outlive the service. Starts the pump thread.
  CoordinatorService(CoordinatorCore* core, ServiceOptions options);
  // Ends open streams (UNAVAILABLE) and joins the pump. Call before the gRPC server's
  // Shutdown(); the destructor does it too.
  void Shutdown();
  ~CoordinatorService() override;

  grpc::Status RegisterWorker(grpc::ServerContext* ctx, const RegisterWorkerRequest* req,
                              RegisterWorkerResponse* resp) override;
  // Callback API too: the hot path at scale (one call per worker per interval) runs on gRPC's
  // own threads without the synchronous server's thread handoff.
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* ctx, const HeartbeatRequest* req,
                                      HeartbeatResponse* resp) override;
  grpc::ServerWriteReactor<Assignment>* StreamAssignments(
      grpc::CallbackServerContext* ctx, const StreamAssignmentsRequest* req) override;
  grpc::Status ListWorkers(grpc::ServerContext* ctx, const ListWorkersRequest* req,
                           ListWorkersResponse* resp) override;
  grpc::Status RendezvousSet(grpc::ServerContext* ctx, const RendezvousSetRequest* req,
                             RendezvousSetResponse* resp) override;
  grpc::ServerUnaryReactor* RendezvousGet(grpc::CallbackServerContext* ctx,
                                          const RendezvousGetRequest* req,
                                          RendezvousGetResponse* resp) override;
  grpc::Status ReportProgress(grpc::ServerContext* ctx, const ProgressReport* req,
                              ReportProgressResponse* resp) override;
  // fault_tolerance REPLICA_GROUPS: on the callback API (every rank of a job waits here each
  // step; no thread is held while it waits), answered when its step is decided, or
  // DEADLINE_EXCEEDED after CoordinatorCore::kMaxStepVoteWait or a little before the caller's
  // deadline ("send the vote again").
  grpc::ServerUnaryReactor* StepVote(grpc::CallbackServerContext* ctx, const StepVoteRequest* req,
                                     StepVoteResponse* resp) override;
  grpc::Status ReportCheckpoint(grpc::ServerContext* ctx, const CheckpointReport* req,
                                ReportCheckpointResponse* resp) override;
  grpc::Status SubmitJob(grpc::ServerContext* ctx, const SubmitJobRequest* req,
                         SubmitJobResponse* resp) override;
  grpc::Status GetJob(grpc::ServerContext* ctx, const GetJobRequest* req, JobStatus* resp) override;
  grpc::Status ListJobs(grpc::ServerContext* ctx, const ListJobsRequest* req,
                        ListJobsResponse* resp) override;
  grpc::Status CancelJob(grpc::ServerContext* ctx, const CancelJobRequest* req,
                         CancelJobResponse* resp) override;
  grpc::ServerWriteReactor<JobStatus>* WatchJob(grpc::CallbackServerContext* ctx,
                                                const WatchJobRequest* req) override;
  grpc::Status ListCheckpoints(grpc::ServerContext* ctx, const ListCheckpointsRequest* req,
                               ListCheckpointsResponse* resp) override;
  grpc::Status GetCheckpoint(grpc::ServerContext* ctx, const GetCheckpointRequest* req,
                             GetCheckpointResponse* resp) override;
  grpc::Status ShipLogs(grpc::ServerContext* ctx, const ShipLogsRequest* req,
                        ShipLogsResponse* resp) override;
  grpc::Status GetLogs(grpc::ServerContext* ctx, const GetLogsRequest* req,
                       GetLogsResponse* resp) override;
  grpc::Status GetJobMetrics(grpc::ServerContext* ctx, const GetJobMetricsRequest* req,
                             GetJobMetricsResponse* resp) override;
  grpc::Status WhoAmI(grpc::ServerContext* ctx, const WhoAmIRequest* req,
                      WhoAmIResponse* resp) override;

 private:
  // A user method: *user receives the caller ("anonymous", an admin, when there are no users).
  grpc::Status AuthorizeUser(const grpc::ServerContextBase* ctx, const char* method,
                             User* user) const;
  // A daemon method: the join token (and the client certificate when required).
  grpc::Status AuthorizeDaemon(const grpc::ServerContextBase* ctx, const char* method) const;
  // The worker's own credential ("x-shardline-worker-credential") for `worker_id`.
  // The x-shardline-worker-credential metadata's value; "" when absent.
  static std::string PresentedWorkerCredential(const grpc::ServerContextBase* ctx);
  grpc::Status CheckWorkerCredential(const grpc::ServerContextBase* ctx,
                                     const std::string& worker_id) const;
  // An attempt method: *attempt receives the attempt the bearer credential belongs to.
  grpc::Status AuthorizeAttempt(const grpc::ServerContextBase* ctx, const char* method,
                                AttemptIdentity* attempt) const;
  // A report of (job_id, attempt) by `caller`.
  static grpc::Status CheckReportFor(const AttemptIdentity& caller, const std::string& job_id,
                                     int32_t attempt);
  // Rendezvous in `ns` by `caller`.
  static grpc::Status CheckNamespaceFor(const AttemptIdentity& caller, const std::string& ns);
  // OK for an admin or the job's owner; PERMISSION_DENIED naming the owner and `action`.
  // The checkpoints a submitted spec starts from (#31 item 3): checkpoint.resume_from must be a
  // committed checkpoint the registry knows of a job `user` owns, and init_from_safetensors may
  // not be a file in another user's job checkpoint directory; an admin may name any (an
  // unregistered checkpoint included). PERMISSION_DENIED naming the field, the job and owner.
  grpc::Status CheckCheckpointSources(const User& user, const JobSpec& spec) const;
  grpc::Status CheckOwner(const User& user, const std::string& job_id, const char* action) const;
  // With mutual TLS: PERMISSION_DENIED unless the client certificate names `node_name`.
  grpc::Status CheckNode(const grpc::ServerContextBase* ctx, const std::string& node_name) const;
  // The same for a worker id (its registered node name).
  grpc::Status CheckWorker(const grpc::ServerContextBase* ctx, const std::string& worker_id) const;

  CoordinatorCore* core_;
  const ServiceOptions options_;
  std::shared_ptr<UserTable> users_;
  std::string worker_token_;  // options_.worker_token, or the user token when that is empty
  std::unique_ptr<StreamHub> hub_;
  std::thread pump_;
  std::atomic<bool> shutdown_{false};
};

}  // namespace shardline::coordinator

#endif  // SHARDLINE_COORDINATOR_SERVICE_H_
