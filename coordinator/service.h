// CoordinatorService: the gRPC face of CoordinatorCore. Each method checks credentials, converts
// the request, calls the core and converts the status (common/grpc_status.h); nothing else.
//
// Credentials ("authorization: Bearer <token>" metadata):
//   - user methods (SubmitJob, GetJob, ListJobs, CancelJob, WatchJob, ListWorkers,
//     ListCheckpoints, GetCheckpoint, GetLogs, GetJobMetrics) need the user token;
//   - worker-side methods (RegisterWorker, Heartbeat, StreamAssignments, ShipLogs,
//     RendezvousSet/Get, ReportProgress, ReportCheckpoint; called by daemons and their
//     trainers) need the worker
//     (join) token, or the user token when no worker token is configured.
// An empty token turns the check of its class off. A missing or wrong token gets
// UNAUTHENTICATED before the core is touched, so nothing changes.
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
#include "coordinator/coordinator_core.h"
#include "proto/coordinator.grpc.pb.h"

namespace shardline::coordinator {

struct ServiceOptions {
  std::string user_token;
  std::string worker_token;
  // Mutual TLS for workers: RegisterWorker, Heartbeat and StreamAssignments also need a client
  // certificate the server verified, naming the worker's node (its subject alternative names or
  // common name must include node_name), so one node cannot act for another.
  bool require_worker_client_cert = false;
  // How often the pump re-checks every stream even without notifications (a safety net).
  absl::Duration sweep = absl::Seconds(5);
};

class StreamHub;  // service.cc

using CoordinatorServiceBase = ::shardline::Coordinator::WithCallbackMethod_StreamAssignments<
    ::shardline::Coordinator::WithCallbackMethod_WatchJob<
        ::shardline::Coordinator::WithCallbackMethod_RendezvousGet<
            ::shardline::Coordinator::WithCallbackMethod_Heartbeat<
                ::shardline::Coordinator::Service>>>>;

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

 private:
  // kDaemon: worker methods the node daemon calls (client certificate when required).
  enum class Role { kUser, kWorker, kDaemon };
  grpc::Status Authorize(const grpc::ServerContextBase* ctx, Role role) const;
  // With mutual TLS: PERMISSION_DENIED unless the client certificate names `node_name`.
  grpc::Status CheckNode(const grpc::ServerContextBase* ctx, const std::string& node_name) const;
  // The same for a worker id (its registered node name).
  grpc::Status CheckWorker(const grpc::ServerContextBase* ctx, const std::string& worker_id) const;

  CoordinatorCore* core_;
  const ServiceOptions options_;
  std::unique_ptr<StreamHub> hub_;
  std::thread pump_;
  std::atomic<bool> shutdown_{false};
};

}  // namespace shardline::coordinator

#endif  // SHARDLINE_COORDINATOR_SERVICE_H_
