// CoordinatorService: the gRPC face of CoordinatorCore. Each method checks credentials, converts
// the request, calls the core and converts the status (common/grpc_status.h); nothing else.
//
// Credentials ("authorization: Bearer <token>" metadata):
//   - user methods (SubmitJob, GetJob, ListJobs, CancelJob, WatchJob, ListWorkers,
//     ListCheckpoints, GetCheckpoint) need the user token;
//   - worker-side methods (RegisterWorker, Heartbeat, StreamAssignments, RendezvousSet/Get,
//     ReportProgress, ReportCheckpoint; called by daemons and their trainers) need the worker
//     (join) token, or the user token when no worker token is configured.
// An empty token turns the check of its class off. A missing or wrong token gets
// UNAUTHENTICATED before the core is touched, so nothing changes.
//
// Streams (StreamAssignments, WatchJob) use the synchronous API: each open stream holds one
// server thread that waits on the core with a short timeout, so it notices cancellation and
// shutdown within `poll`.
//
// Thread safety: gRPC calls the methods from many threads; the core is thread-safe.
#ifndef SHARDLINE_COORDINATOR_SERVICE_H_
#define SHARDLINE_COORDINATOR_SERVICE_H_

#include <atomic>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/time/time.h"
#include "coordinator/coordinator_core.h"
#include "proto/coordinator.grpc.pb.h"

namespace shardline::coordinator {

struct ServiceOptions {
  std::string user_token;
  std::string worker_token;
  // Mutual TLS for workers: RegisterWorker, Heartbeat and StreamAssignments also need a client
  // certificate the server verified.
  bool require_worker_client_cert = false;
  // How often blocked stream handlers re-check cancellation and shutdown.
  absl::Duration poll = absl::Milliseconds(250);
};

class CoordinatorService final : public ::shardline::Coordinator::Service {
 public:
  // `core` must outlive the service.
  CoordinatorService(CoordinatorCore* core, ServiceOptions options)
      : core_(core), options_(std::move(options)) {}

  // Makes open streams end (with UNAVAILABLE) so the server can shut down.
  void Shutdown() { shutdown_ = true; }

  grpc::Status RegisterWorker(grpc::ServerContext* ctx, const RegisterWorkerRequest* req,
                              RegisterWorkerResponse* resp) override;
  grpc::Status Heartbeat(grpc::ServerContext* ctx, const HeartbeatRequest* req,
                         HeartbeatResponse* resp) override;
  grpc::Status StreamAssignments(grpc::ServerContext* ctx, const StreamAssignmentsRequest* req,
                                 grpc::ServerWriter<Assignment>* writer) override;
  grpc::Status ListWorkers(grpc::ServerContext* ctx, const ListWorkersRequest* req,
                           ListWorkersResponse* resp) override;
  grpc::Status RendezvousSet(grpc::ServerContext* ctx, const RendezvousSetRequest* req,
                             RendezvousSetResponse* resp) override;
  grpc::Status RendezvousGet(grpc::ServerContext* ctx, const RendezvousGetRequest* req,
                             RendezvousGetResponse* resp) override;
  grpc::Status ReportProgress(grpc::ServerContext* ctx, const ProgressReport* req,
                              ReportProgressResponse* resp) override;
  grpc::Status ReportCheckpoint(grpc::ServerContext* ctx, const CheckpointReport* req,
                                ReportCheckpointResponse* resp) override;
  grpc::Status SubmitJob(grpc::ServerContext* ctx, const SubmitJobRequest* req,
                         SubmitJobResponse* resp) override;
  grpc::Status GetJob(grpc::ServerContext* ctx, const GetJobRequest* req,
                      JobStatus* resp) override;
  grpc::Status ListJobs(grpc::ServerContext* ctx, const ListJobsRequest* req,
                        ListJobsResponse* resp) override;
  grpc::Status CancelJob(grpc::ServerContext* ctx, const CancelJobRequest* req,
                         CancelJobResponse* resp) override;
  grpc::Status WatchJob(grpc::ServerContext* ctx, const WatchJobRequest* req,
                        grpc::ServerWriter<JobStatus>* writer) override;
  grpc::Status ListCheckpoints(grpc::ServerContext* ctx, const ListCheckpointsRequest* req,
                               ListCheckpointsResponse* resp) override;
  grpc::Status GetCheckpoint(grpc::ServerContext* ctx, const GetCheckpointRequest* req,
                             GetCheckpointResponse* resp) override;

 private:
  // kDaemon: worker methods the node daemon calls (client certificate when required).
  enum class Role { kUser, kWorker, kDaemon };
  grpc::Status Authorize(const grpc::ServerContext* ctx, Role role) const;

  CoordinatorCore* core_;
  const ServiceOptions options_;
  std::atomic<bool> shutdown_{false};
};

}  // namespace shardline::coordinator

#endif  // SHARDLINE_COORDINATOR_SERVICE_H_
