// CoordinatorClient: the typed client every other binary uses to talk to the coordinator
// (worker daemon, shardctl, trainers' rendezvous and reports). Every call carries a deadline
// (Options::timeout, or the stream's max duration) and, when a token is set, the metadata
// "authorization: Bearer <token>"; once RegisterWorker succeeded (or SetWorkerCredential was
// called), also "x-shardline-worker-credential: <the worker's credential>". Errors are the server's
// status codes, with the method name prefixed to the message ("SubmitJob: world_size: must be >= 1,
// got 0"). Without TLS a client refuses to send a token to a non-loopback address unless told
// `insecure`.
//
// Thread safety: all methods may be called from several threads at once; streams block their
// caller. CancelStreams() from another thread ends every open stream of this client.
#ifndef SHARDLINE_CLIENT_CLIENT_H_
#define SHARDLINE_CLIENT_CLIENT_H_

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/coordinator.grpc.pb.h"

namespace shardline::client {

class CoordinatorClient {
 public:
  struct Options {
    std::string address;  // host:port
    // User token, worker join token or (trainers) the attempt credential; empty: none sent.
    std::string token;
    absl::Duration timeout = absl::Seconds(10);
    // TLS: PEM contents (not paths). Root certificates turn TLS on; the certificate chain and
    // key are the client certificate for mutual TLS (worker daemons).
    std::string tls_root_certs;
    std::string tls_cert_chain;
    std::string tls_private_key;
    // Allows sending `token` without TLS to an address that is not loopback (--insecure).
    bool insecure = false;
  };
  // Creates the channel (connects lazily). Errors: INVALID_ARGUMENT for an empty address;
  // FAILED_PRECONDITION for a token, no TLS root certificates and a non-loopback address
  // unless `insecure` (a token is never sent in clear text off this machine by default).
  // Client TLS files and flags: client/client_tls.h.
  static absl::StatusOr<std::unique_ptr<CoordinatorClient>> Create(const Options& options);
  static absl::StatusOr<std::unique_ptr<CoordinatorClient>> Create(const std::string& address,
                                                                   const std::string& token);

  // Waits up to `timeout` for the channel to connect. Errors: UNAVAILABLE.
  absl::Status WaitForReady(absl::Duration timeout);

  // ---- workers
  // On success the response's worker_credential becomes this client's (SetWorkerCredential).
  absl::StatusOr<RegisterWorkerResponse> RegisterWorker(const RegisterWorkerRequest& req);
  // The worker credential every later call sends (empty: none).
  void SetWorkerCredential(const std::string& credential);
  // `worker_credential`, when set, is sent instead of this client's (one client beating for many
  // workers: the load benchmark).
  absl::StatusOr<HeartbeatResponse> Heartbeat(const HeartbeatRequest& req,
                                              const std::string& worker_credential = "");
  absl::StatusOr<std::vector<WorkerInfo>> ListWorkers();
  // Calls `on_assignment` for each assignment until it returns false (then OK), the server ends
  // the stream (its status), `max_duration` passes (DEADLINE_EXCEEDED) or CancelStreams()
  // (CANCELLED).
  absl::Status StreamAssignments(const std::string& worker_id,
                                 const std::function<bool(const Assignment&)>& on_assignment,
                                 absl::Duration max_duration = absl::Hours(24 * 365));

  // ---- rendezvous. Get waits up to `timeout` server-side (capped by the server; the call's
  // deadline is that plus Options::timeout).
  absl::Status RendezvousSet(const std::string& ns, const std::string& secret,
                             const std::string& key, const std::string& value);
  absl::StatusOr<std::vector<std::string>> RendezvousGet(const std::string& ns,
                                                         const std::string& secret,
                                                         const std::vector<std::string>& keys,
                                                         absl::Duration timeout);

  // ---- reports. `attempt_credential`, when set, is sent as the bearer token instead of
  // Options::token (a daemon relaying its trainers' progress uses the attempt's credential).
  // ReportProgress's answer (the job's durable step) goes to `response` when given.
  absl::Status ReportProgress(const ProgressReport& report,
                              const std::string& attempt_credential = "",
                              ReportProgressResponse* response = nullptr);
  absl::Status ReportCheckpoint(const CheckpointReport& report,
                                const std::string& attempt_credential = "");
  // A rank's vote on a step of a replica-group fault-tolerant job (docs/failures.md, "Replica-
  // group fault tolerance"). The coordinator holds the call until the step is decided, up to
  // about 20 s; the call's deadline is Options::timeout plus 30 s. Errors: the server's
  // (DEADLINE_EXCEEDED "no decision yet": send the same vote again; UNAVAILABLE: retry with
  // backoff; UNAUTHENTICATED / PERMISSION_DENIED for another attempt's credential).
  absl::StatusOr<StepVoteResponse> StepVote(const StepVoteRequest& request,
                                            const std::string& attempt_credential = "");

  // ---- jobs
  absl::StatusOr<std::string> SubmitJob(const JobSpec& spec);
  absl::StatusOr<JobStatus> GetJob(const std::string& job_id);
  absl::StatusOr<std::vector<JobStatus>> ListJobs(const std::vector<JobState>& states = {});
  absl::Status CancelJob(const std::string& job_id, const std::string& reason = "");
  // The job's status now and on every change, until it ends (OK after the terminal status) or
  // `on_status` returns false (OK) or as StreamAssignments.
  absl::Status WatchJob(const std::string& job_id,
                        const std::function<bool(const JobStatus&)>& on_status,
                        absl::Duration max_duration = absl::Hours(24 * 365));

  // ---- checkpoints
  absl::StatusOr<std::vector<CheckpointInfo>> ListCheckpoints(const std::string& job_id);
  absl::StatusOr<GetCheckpointResponse> GetCheckpoint(const std::string& job_id, int64_t step);

  // ---- logs and training metrics
  absl::Status ShipLogs(const ShipLogsRequest& req);
  absl::StatusOr<GetLogsResponse> GetLogs(const GetLogsRequest& req);
  absl::StatusOr<GetJobMetricsResponse> GetJobMetrics(const std::string& job_id,
                                                      int64_t after_step = 0);
  // ---- identity
  absl::StatusOr<WhoAmIResponse> WhoAmI();

  // Ends every stream open on this client (they return CANCELLED).
  void CancelStreams();

 private:
  explicit CoordinatorClient(const Options& options);
  // A context with the deadline `timeout` from now, the token (`bearer` instead when set) and
  // the worker credential (`worker_credential` instead when set).
  std::unique_ptr<grpc::ClientContext> Context(absl::Duration timeout,
                                               const std::string& bearer = "",
                                               const std::string& worker_credential = "") const;
  template <typename Msg>
  absl::Status ReadStream(const char* method, grpc::ClientContext* ctx,
                          grpc::ClientReader<Msg>* reader,
                          const std::function<bool(const Msg&)>& on_message);

  const Options options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<::shardline::Coordinator::Stub> stub_;
  absl::Mutex mu_;
  std::set<grpc::ClientContext*> streams_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  mutable absl::Mutex credential_mu_;
  std::string worker_credential_ ABSL_GUARDED_BY(credential_mu_);
};

}  // namespace shardline::client

#endif  // SHARDLINE_CLIENT_CLIENT_H_
