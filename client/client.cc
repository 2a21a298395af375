#include "client/client.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/loopback.h"

namespace shardline::client {
namespace {

std::chrono::system_clock::time_point Deadline(absl::Duration timeout) {
  return absl::ToChronoTime(absl::Now() + timeout);
}

}  // namespace

namespace {
std::shared_ptr<grpc::ChannelCredentials> Credentials(const CoordinatorClient::Options& o) {
  if (o.tls_root_certs.empty()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = o.tls_root_certs;
  ssl.pem_cert_chain = o.tls_cert_chain;
  ssl.pem_private_key = o.tls_private_key;
  return grpc::SslCredentials(ssl);
}
// Each client gets its own connection: gRPC would otherwise share one TCP connection between
// all channels to the same address in a process (e.g. a daemon's stream and its heartbeats).
grpc::ChannelArguments ChannelArgs() {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  // gRPC's reconnect backoff grows to 120 s by default: a coordinator back after a restart would
  // go unheard (and its workers be declared dead) for minutes. Retry at least once a second.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // Despite its name, gRPC uses MIN_RECONNECT_BACKOFF as the deadline of one connection attempt
  // (TCP connect + HTTP/2 SETTINGS). Two failures bound it:
  // - too short (it was 100 ms): on a loaded machine slower handshakes failed with "connection
  //   attempt timed out before receiving SETTINGS frame", and the coordinator looked down;
  // - too long (5 s was tried): an attempt that hangs (seen around a coordinator restart) holds
  //   the channel in its last failure, so calls keep failing with the cached "Connection
  //   refused" for that long after the coordinator is back, and workers were declared dead.
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 1500);
  return args;
}
}  // namespace

CoordinatorClient::CoordinatorClient(const Options& options)
    : options_(options),
      channel_(grpc::CreateCustomChannel(options.address, Credentials(options), ChannelArgs())),
      stub_(::shardline::Coordinator::NewStub(channel_)) {}

absl::StatusOr<std::unique_ptr<CoordinatorClient>> CoordinatorClient::Create(
    const Options& options) {
  if (options.address.empty()) {
    return absl::InvalidArgumentError("coordinator address must not be empty");
  }
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("client timeout must be positive");
  }
  if (!options.token.empty() && options.tls_root_certs.empty() && !options.insecure &&
      !IsLoopbackAddress(options.address)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "refusing to send the token in clear text to ", options.address,
        ", which is not a loopback address: pass --tls_ca=CA.pem to connect with TLS, or "
        "--insecure to send it in plain text on a trusted network"));
  }
  return std::unique_ptr<CoordinatorClient>(new CoordinatorClient(options));
}

absl::StatusOr<std::unique_ptr<CoordinatorClient>> CoordinatorClient::Create(
    const std::string& address, const std::string& token) {
  Options o;
  o.address = address;
  o.token = token;
  return Create(o);
}

absl::Status CoordinatorClient::WaitForReady(absl::Duration timeout) {
  if (channel_->WaitForConnected(Deadline(timeout))) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat("coordinator at ", options_.address,
                                             " not reachable within ",
                                             absl::FormatDuration(timeout)));
}

std::unique_ptr<grpc::ClientContext> CoordinatorClient::Context(
    absl::Duration timeout, const std::string& bearer, const std::string& worker_credential) const {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(Deadline(timeout));
  const std::string& token = bearer.empty() ? options_.token : bearer;
  if (!token.empty()) ctx->AddMetadata("authorization", "Bearer " + token);
  if (!worker_credential.empty()) {
    ctx->AddMetadata("x-shardline-worker-credential", worker_credential);
    return ctx;
  }
  absl::MutexLock lock(&credential_mu_);
  if (!worker_credential_.empty()) {
    ctx->AddMetadata("x-shardline-worker-credential", worker_credential_);
  }
  return ctx;
}

void CoordinatorClient::SetWorkerCredential(const std::string& credential) {
  absl::MutexLock lock(&credential_mu_);
  worker_credential_ = credential;
}

#define SL_UNARY(Method, req, resp)                           \
  do {                                                        \
    auto ctx_ = Context(options_.timeout);                    \
    grpc::Status st_ = stub_->Method(ctx_.get(), req, &resp); \
    if (!st_.ok()) return FromGrpcStatus(st_, #Method);       \
  } while (0)

absl::StatusOr<RegisterWorkerResponse> CoordinatorClient::RegisterWorker(
    const RegisterWorkerRequest& req) {
  RegisterWorkerResponse resp;
  SL_UNARY(RegisterWorker, req, resp);
  SetWorkerCredential(resp.worker_credential());
  return resp;
}

absl::StatusOr<HeartbeatResponse> CoordinatorClient::Heartbeat(
    const HeartbeatRequest& req, const std::string& worker_credential) {
  HeartbeatResponse resp;
  auto ctx = Context(options_.timeout, "", worker_credential);
  grpc::Status st = stub_->Heartbeat(ctx.get(), req, &resp);
  if (!st.ok()) return FromGrpcStatus(st, "Heartbeat");
  return resp;
}

absl::StatusOr<std::vector<WorkerInfo>> CoordinatorClient::ListWorkers() {
  ListWorkersRequest req;
  ListWorkersResponse resp;
  SL_UNARY(ListWorkers, req, resp);
  return std::vector<WorkerInfo>(resp.workers().begin(), resp.workers().end());
}

absl::Status CoordinatorClient::RendezvousSet(const std::string& ns, const std::string& secret,
                                              const std::string& key, const std::string& value) {
  RendezvousSetRequest req;
  req.set_namespace_(ns);
  req.set_secret(secret);
  req.set_key(key);
  req.set_value(value);
  RendezvousSetResponse resp;
  SL_UNARY(RendezvousSet, req, resp);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> CoordinatorClient::RendezvousGet(
    const std::string& ns, const std::string& secret, const std::vector<std::string>& keys,
    absl::Duration timeout) {
  RendezvousGetRequest req;
  req.set_namespace_(ns);
  req.set_secret(secret);
  for (const std::string& k : keys) req.add_keys(k);
  req.set_timeout_ms(
      static_cast<int32_t>(std::min<int64_t>(absl::ToInt64Milliseconds(timeout), INT32_MAX)));
  RendezvousGetResponse resp;
  auto ctx = Context(timeout + options_.timeout);
  grpc::Status st = stub_->RendezvousGet(ctx.get(), req, &resp);
  if (!st.ok()) return FromGrpcStatus(st, "RendezvousGet");
  return std::vector<std::string>(resp.values().begin(), resp.values().end());
}

absl::Status CoordinatorClient::ReportProgress(const ProgressReport& report,
                                               const std::string& attempt_credential,
                                               ReportProgressResponse* response) {
  ReportProgressResponse resp;
  auto ctx = Context(options_.timeout, attempt_credential);
  grpc::Status st = stub_->ReportProgress(ctx.get(), report, &resp);
  if (!st.ok()) return FromGrpcStatus(st, "ReportProgress");
  if (response != nullptr) *response = std::move(resp);
  return absl::OkStatus();
}

absl::Status CoordinatorClient::ReportCheckpoint(const CheckpointReport& report,
                                                 const std::string& attempt_credential) {
  ReportCheckpointResponse resp;
  auto ctx = Context(options_.timeout, attempt_credential);
  grpc::Status st = stub_->ReportCheckpoint(ctx.get(), report, &resp);
  if (!st.ok()) return FromGrpcStatus(st, "ReportCheckpoint");
  return absl::OkStatus();
}

absl::StatusOr<StepVoteResponse> CoordinatorClient::StepVote(
    const StepVoteRequest& request, const std::string& attempt_credential) {
  StepVoteResponse resp;
  // The server holds the call until the step is decided (bounded server-side).
  auto ctx = Context(options_.timeout + absl::Seconds(30), attempt_credential);
  grpc::Status st = stub_->StepVote(ctx.get(), request, &resp);
  if (!st.ok()) return FromGrpcStatus(st, "StepVote");
  return resp;
}

absl::StatusOr<WhoAmIResponse> CoordinatorClient::WhoAmI() {
  WhoAmIRequest req;
  WhoAmIResponse resp;
  SL_UNARY(WhoAmI, req, resp);
  return resp;
}

absl::StatusOr<std::string> CoordinatorClient::SubmitJob(const JobSpec& spec) {
  SubmitJobRequest req;
  *req.mutable_spec() = spec;
  SubmitJobResponse resp;
  SL_UNARY(SubmitJob, req, resp);
  return resp.job_id();
}

absl::StatusOr<JobStatus> CoordinatorClient::GetJob(const std::string& job_id) {
  GetJobRequest req;
  req.set_job_id(job_id);
  JobStatus resp;
  SL_UNARY(GetJob, req, resp);
  return resp;
}

absl::StatusOr<std::vector<JobStatus>> CoordinatorClient::ListJobs(
    const std::vector<JobState>& states) {
  ListJobsRequest req;
  for (JobState s : states) req.add_states(s);
  std::vector<JobStatus> jobs;
  do {  // Page by page, at the coordinator's default page size.
    ListJobsResponse resp;
    SL_UNARY(ListJobs, req, resp);
    jobs.insert(jobs.end(), resp.jobs().begin(), resp.jobs().end());
    req.set_page_token(resp.next_page_token());
  } while (!req.page_token().empty());
  return jobs;
}

absl::Status CoordinatorClient::CancelJob(const std::string& job_id, const std::string& reason) {
  CancelJobRequest req;
  req.set_job_id(job_id);
  req.set_reason(reason);
  CancelJobResponse resp;
  SL_UNARY(CancelJob, req, resp);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<CheckpointInfo>> CoordinatorClient::ListCheckpoints(
    const std::string& job_id) {
  ListCheckpointsRequest req;
  req.set_job_id(job_id);
  ListCheckpointsResponse resp;
  SL_UNARY(ListCheckpoints, req, resp);
  return std::vector<CheckpointInfo>(resp.checkpoints().begin(), resp.checkpoints().end());
}

absl::StatusOr<GetCheckpointResponse> CoordinatorClient::GetCheckpoint(const std::string& job_id,
                                                                       int64_t step) {
  GetCheckpointRequest req;
  req.set_job_id(job_id);
  req.set_step(step);
  GetCheckpointResponse resp;
  SL_UNARY(GetCheckpoint, req, resp);
  return resp;
}

absl::Status CoordinatorClient::ShipLogs(const ShipLogsRequest& req) {
  ShipLogsResponse resp;
  SL_UNARY(ShipLogs, req, resp);
  return absl::OkStatus();
}

absl::StatusOr<GetLogsResponse> CoordinatorClient::GetLogs(const GetLogsRequest& req) {
  GetLogsResponse resp;
  SL_UNARY(GetLogs, req, resp);
  return resp;
}

absl::StatusOr<GetJobMetricsResponse> CoordinatorClient::GetJobMetrics(const std::string& job_id,
                                                                       int64_t after_step) {
  GetJobMetricsRequest req;
  req.set_job_id(job_id);
  req.set_after_step(after_step);
  GetJobMetricsResponse resp;
  SL_UNARY(GetJobMetrics, req, resp);
  return resp;
}

template <typename Msg>
absl::Status CoordinatorClient::ReadStream(const char* method, grpc::ClientContext* ctx,
                                           grpc::ClientReader<Msg>* reader,
                                           const std::function<bool(const Msg&)>& on_message) {
  Msg msg;
  bool stopped = false;
  while (reader->Read(&msg)) {
    if (!on_message(msg)) {
      stopped = true;
      ctx->TryCancel();
      break;
    }
  }
  grpc::Status st = reader->Finish();
  {
    absl::MutexLock lock(&mu_);
    streams_.erase(ctx);
  }
  if (stopped) return absl::OkStatus();
  return FromGrpcStatus(st, method);
}

void CoordinatorClient::CancelStreams() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
  for (grpc::ClientContext* ctx : streams_) ctx->TryCancel();
}

absl::Status CoordinatorClient::StreamAssignments(
    const std::string& worker_id, const std::function<bool(const Assignment&)>& on_assignment,
    absl::Duration max_duration) {
  auto ctx = Context(max_duration);
  {
    absl::MutexLock lock(&mu_);
    if (cancelled_) return absl::CancelledError("StreamAssignments: client streams cancelled");
    streams_.insert(ctx.get());
  }
  StreamAssignmentsRequest req;
  req.set_worker_id(worker_id);
  auto reader = stub_->StreamAssignments(ctx.get(), req);
  return ReadStream<Assignment>("StreamAssignments", ctx.get(), reader.get(), on_assignment);
}

absl::Status CoordinatorClient::WatchJob(const std::string& job_id,
                                         const std::function<bool(const JobStatus&)>& on_status,
                                         absl::Duration max_duration) {
  auto ctx = Context(max_duration);
  {
    absl::MutexLock lock(&mu_);
    if (cancelled_) return absl::CancelledError("WatchJob: client streams cancelled");
    streams_.insert(ctx.get());
  }
  WatchJobRequest req;
  req.set_job_id(job_id);
  auto reader = stub_->WatchJob(ctx.get(), req);
  return ReadStream<JobStatus>("WatchJob", ctx.get(), reader.get(), on_status);
}

}  // namespace shardline::client
