#include "coordinator/server.h"

#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/resource_quota.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/loopback.h"

namespace shardline::coordinator {

namespace {

// The security rules of server.h on the listen addresses, the tokens and TLS, and the gRPC
// bounds: a refused combination names the flags to set.
absl::Status CheckOptions(const ServerOptions& options, const UserTable& users) {
  const bool loopback = IsLoopbackAddress(options.listen);
  if (!options.users_file.empty() && options.worker_token.empty()) {
    return absl::FailedPreconditionError(
        "--users_file needs --worker_token_file (or --worker_token): workers join with a token "
        "of their own, never a user's");
  }
  if (!loopback && users.empty() && options.worker_token.empty()) {
    if (!options.insecure) {
      return absl::FailedPreconditionError(absl::StrCat(
          "refusing to listen on non-loopback address ", options.listen,
          " without --token and --worker_token (add --insecure to run without tokens on a "
          "trusted network)"));
    }
  } else if (!loopback) {
    if (options.worker_token.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("refusing to listen on non-loopback address ", options.listen,
                       " without a worker join token of its own: set --worker_token_file (or "
                       "--worker_token); off loopback workers never join with the user token "
                       "(--token/--token_file/--users_file)"));
    }
    if (std::optional<User> u = users.Find(options.worker_token)) {
      return absl::FailedPreconditionError(
          absl::StrCat("refusing to listen on non-loopback address ", options.listen,
                       ": --worker_token equals the token of user ", u->name,
                       " (--token/--token_file/--users_file); give workers a token of their own"));
    }
    if (users.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("refusing to listen on non-loopback address ", options.listen,
                       " with a worker token but no users: set --token_file or --users_file"));
    }
  }
  if (!options.dashboard_listen.empty() && !IsLoopbackAddress(options.dashboard_listen) &&
      users.empty() && !options.insecure) {
    return absl::FailedPreconditionError(absl::StrCat(
        "refusing to serve the dashboard on non-loopback address ", options.dashboard_listen,
        " without users (--token_file or --users_file; --insecure to show every job to anyone "
        "who can reach it)"));
  }
  // The session cookie and the tokens typed into /login must not cross a network in clear text.
  if (!options.dashboard_listen.empty() && !IsLoopbackAddress(options.dashboard_listen) &&
      options.tls_cert_pem.empty() && !options.insecure) {
    return absl::FailedPreconditionError(absl::StrCat(
        "refusing to serve the dashboard on non-loopback address ", options.dashboard_listen,
        " over plain HTTP: set --tls_cert and --tls_key (the dashboard serves HTTPS with them), "
        "or --insecure to send tokens and session cookies in clear text"));
  }
  if (options.tls_cert_pem.empty() != options.tls_key_pem.empty()) {
    return absl::InvalidArgumentError("TLS needs both a certificate and its private key");
  }
  if (!options.tls_client_ca_pem.empty() && options.tls_cert_pem.empty()) {
    return absl::InvalidArgumentError("a client CA (mutual TLS) needs a server certificate too");
  }
  if (options.grpc_max_threads < 2 || options.grpc_memory_bytes < 1 ||
      options.grpc_max_concurrent_streams < 1 || options.grpc_max_receive_message_bytes < 1) {
    return absl::InvalidArgumentError(
        "--grpc_max_threads must be at least 2 and --grpc_memory_mb, "
        "--grpc_max_concurrent_streams, --grpc_max_receive_message_bytes at least 1");
  }
  return absl::OkStatus();
}

CoreOptions CoreOptionsFrom(const ServerOptions& options, const Clock* clock) {
  CoreOptions core;
  core.clock = clock;
  core.state_dir = options.state_dir;
  core.heartbeat_interval = options.heartbeat_interval;
  core.heartbeat_timeout = options.heartbeat_timeout;
  core.blind_gap = options.heartbeat_timeout / 2;  // ticks come every options.tick
  core.stop_grace_period_s = options.stop_grace_period_s;
  core.rank_start_timeout = options.rank_start_timeout;
  core.preempt_timeout = options.preempt_timeout;
  core.validate_spec = options.validate_spec;
  core.metrics_flush_interval = options.metrics_flush_interval;
  core.metrics_series_capacity = options.metrics_series_capacity;
  core.logs = options.logs;
  core.rendezvous_limits = options.rendezvous_limits;
  core.max_events_per_job = options.max_events_per_job;
  core.max_list_page_size = options.max_list_page_size;
  core.finished_job_ttl = options.finished_job_ttl;
  core.max_finished_jobs = options.max_finished_jobs;
  core.quotas = options.quotas;
  core.max_checkpoints_per_job = options.max_checkpoints_per_job;
  core.max_world_size = options.max_world_size;
  return core;
}

std::shared_ptr<grpc::ServerCredentials> ServerCredentials(const ServerOptions& options) {
  if (options.tls_cert_pem.empty()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions ssl(options.tls_client_ca_pem.empty()
                                            ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                            : GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
  ssl.pem_root_certs = options.tls_client_ca_pem;
  ssl.pem_key_cert_pairs.push_back({options.tls_key_pem, options.tls_cert_pem});
  return grpc::SslServerCredentials(ssl);
}

// The users file's own bounds as the core applies them (the auth package knows no quotas).
UserQuotaOverrides QuotaOverrides(const UserTable& users) {
  UserQuotaOverrides out;
  for (const auto& [name, limits] : users.Limits()) {
    out[name] = {limits.max_running_ranks, limits.max_pending_jobs};
  }
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<CoordinatorServer>> CoordinatorServer::Create(
    const ServerOptions& options) {
  absl::StatusOr<std::unique_ptr<UserTable>> users =
      UserTable::Create(options.users_file, options.user_token);
  if (!users.ok()) return users.status();
  if (absl::Status st = CheckOptions(options, **users); !st.ok()) return st;
  if (options.tls_cert_pem.empty() && !IsLoopbackAddress(options.listen)) {
    SL_LOG(WARNING) << "serving " << options.listen
                    << " without TLS: tokens and job specs travel in plain text (--tls_cert and "
                       "--tls_key serve TLS)";
  }
  std::unique_ptr<CoordinatorServer> s(new CoordinatorServer());
  auto c = CoordinatorCore::Create(CoreOptionsFrom(options, &s->clock_));
  if (!c.ok()) return c.status();
  s->core_ = std::move(*c);
  s->users_ = std::shared_ptr<UserTable>(std::move(*users));
  s->core_->SetUserQuotas(QuotaOverrides(*s->users_));
  ServiceOptions so;
  so.users = s->users_;
  so.user_token = options.user_token;
  so.worker_token = options.worker_token;
  so.require_worker_client_cert = !options.tls_client_ca_pem.empty();
  s->service_ = std::make_unique<CoordinatorService>(s->core_.get(), so);
  if (absl::Status st = s->StartGrpc(options); !st.ok()) return st;
  if (absl::Status st = s->StartMetrics(options); !st.ok()) return st;
  if (absl::Status st = s->StartDashboard(options); !st.ok()) return st;
  s->tick_ = options.tick;
  CoordinatorServer* self = s.get();
  s->ticker_ = std::thread([self] { self->TickLoop(); });
  return s;
}

absl::Status CoordinatorServer::StartGrpc(const ServerOptions& options) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(options.listen, ServerCredentials(options), &port);
  builder.RegisterService(service_.get());
  grpc::ResourceQuota quota("shardline-coordinator");
  quota.SetMaxThreads(options.grpc_max_threads);
  quota.Resize(static_cast<size_t>(options.grpc_memory_bytes));
  builder.SetResourceQuota(quota);
  builder.SetMaxReceiveMessageSize(options.grpc_max_receive_message_bytes);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, options.grpc_max_concurrent_streams);
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> icpt;
  icpt.push_back(MakeMetricsInterceptor(&prometheus_));
  builder.experimental().SetInterceptorCreators(std::move(icpt));
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options.listen));
  }
  absl::string_view host = options.listen;
  if (size_t colon = host.rfind(':'); colon != absl::string_view::npos) {
    host = host.substr(0, colon);
  }
  address_ = absl::StrCat(host, ":", port);
  server_->GetHealthCheckService()->SetServingStatus(true);
  return absl::OkStatus();
}

absl::Status CoordinatorServer::StartMetrics(const ServerOptions& options) {
  if (options.metrics_listen.empty()) return absl::OkStatus();
  auto auth =
      MetricsAuth::Create(options.metrics_listen, users_, options.metrics_token, options.insecure);
  if (!auth.ok()) return auth.status();
  auto m = MetricsHttpServer::Start(
      options.metrics_listen, [this] { return prometheus_.Render(*core_); }, options.metrics,
      *std::move(auth));
  if (!m.ok()) return m.status();
  metrics_ = std::move(*m);
  return absl::OkStatus();
}

absl::Status CoordinatorServer::StartDashboard(const ServerOptions& options) {
  if (options.dashboard_listen.empty()) return absl::OkStatus();
  dashboard::DashboardOptions dashboard = options.dashboard;
  dashboard.tls_cert_pem = options.tls_cert_pem;  // the coordinator's certificate, reused
  dashboard.tls_key_pem = options.tls_key_pem;
  auto d =
      dashboard::DashboardServer::Start(options.dashboard_listen, core_.get(), users_, dashboard);
  if (!d.ok()) return d.status();
  dashboard_ = std::move(*d);
  return absl::OkStatus();
}

void CoordinatorServer::TickLoop() {
  absl::Time next_users_check = absl::Now() + absl::Seconds(1);
  while (!stop_.WaitForNotificationWithTimeout(tick_)) {
    core_->Tick();
    if (absl::Now() < next_users_check) continue;
    next_users_check = absl::Now() + absl::Seconds(1);
    const size_t before = users_->size();
    absl::StatusOr<bool> r = users_->ReloadIfChanged();
    if (!r.ok()) {
      SL_LOG(ERROR) << "users file not reloaded, keeping the previous " << before
                    << " user(s): " << r.status();
    } else if (*r) {
      SL_LOG(INFO) << "users file reloaded: " << users_->size() << " user(s)";
      core_->SetUserQuotas(QuotaOverrides(*users_));
    }
  }
}

CoordinatorServer::~CoordinatorServer() { Shutdown(); }

void CoordinatorServer::Wait() { stop_.WaitForNotification(); }

void CoordinatorServer::Shutdown() {
  std::call_once(shutdown_once_, [this] {
    if (!stop_.HasBeenNotified()) stop_.Notify();
    if (ticker_.joinable()) ticker_.join();
    if (metrics_) metrics_->Stop();
    if (dashboard_) dashboard_->Stop();
    if (server_) {
      server_->GetHealthCheckService()->SetServingStatus(false);
      service_->Shutdown();  // ends open streams, then the core
      server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
      server_->Wait();
    }
  });
}

}  // namespace shardline::coordinator
