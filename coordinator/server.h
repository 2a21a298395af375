// CoordinatorServer: the running coordinator process minus flag parsing: the core, the gRPC
// service and the health service on one listening port, and the periodic tick (worker liveness,
// scheduling).
//
// Security rules: a listen address that is not loopback needs users (a user token or a users
// file) and a worker join token of its own (set, and no user's token), unless it has no tokens
// at all and `insecure` is set. On loopback an unset worker token falls back to the single user
// token (the old behaviour); with a users file a worker token is required everywhere. The users
// file is polled on the tick thread (about once a second) and reloaded when it changes; a
// refused reload keeps the old users and is logged. TLS (tls_cert_pem/tls_key_pem) is optional;
// without it tokens travel in plain text and a warning is logged (and clients refuse to send a
// token to a non-loopback address without TLS unless told --insecure: client.h). With
// tls_client_ca_pem, client certificates are requested and verified, and the daemon's calls
// (RegisterWorker, Heartbeat, StreamAssignments) require one (mutual TLS for workers); users and
// trainers still authenticate by token.
//
// The core's blind gap (core_options.h) is half the heartbeat timeout: a coordinator that could not
// tick for longer (stopped, paused, starved) declares no worker dead for it.
//
// Thread safety: Shutdown() may be called from any thread, once Create() returned.
#ifndef SHARDLINE_COORDINATOR_SERVER_H_
#define SHARDLINE_COORDINATOR_SERVER_H_

#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "coordinator/auth/user_table.h"
#include "coordinator/core/coordinator_core.h"
#include "coordinator/dashboard/dashboard_server.h"
#include "coordinator/http/metrics.h"
#include "coordinator/http/metrics_http_server.h"
#include "coordinator/service.h"

namespace shardline::coordinator {

struct ServerOptions {
  // host:port; port 0 picks a free one (see CoordinatorServer::address()).
  std::string listen = "127.0.0.1:0";
  std::string state_dir;
  absl::Duration heartbeat_interval = absl::Seconds(2);
  absl::Duration heartbeat_timeout = absl::Seconds(10);
  absl::Duration tick = absl::Milliseconds(200);
  absl::Duration rank_start_timeout = absl::Minutes(2);
  int32_t stop_grace_period_s = 10;
  // CoreOptions::preempt_timeout (--preempt_timeout_s).
  absl::Duration preempt_timeout = absl::Minutes(5);
  // The legacy single user token (admin user "admin") and/or a users file (user_table.h).
  std::string user_token;
  std::string users_file;
  std::string worker_token;
  bool insecure = false;
  // PEM contents (not paths). Cert and key together turn TLS on.
  std::string tls_cert_pem;
  std::string tls_key_pem;
  std::string tls_client_ca_pem;
  // host:port of the Prometheus endpoint (GET /metrics); empty: none. Off loopback a scrape needs
  // a user token or `metrics_token` (MetricsAuth); without either it needs `insecure`.
  std::string metrics_listen;
  std::string metrics_token;  // --metrics_token_file; empty: none
  // Training series: written at most this often per job; points kept before pairs merge.
  absl::Duration metrics_flush_interval = absl::Seconds(5);
  int metrics_series_capacity = TrainingSeries::kDefaultCapacity;
  // Bounds of the ranks' log lines kept in memory (job_logs.h).
  JobLogs::Options logs;
  MetricsHttpOptions metrics;
  // host:port of the web dashboard (dashboard/dashboard_server.h); empty: none. Off loopback it
  // needs users (or `insecure`), as the API does.
  std::string dashboard_listen;
  dashboard::DashboardOptions dashboard;
  // gRPC resource bounds (docs/security.md, "Resource bounds"). Threads serve the synchronous
  // (unary) methods; the long waits (streams, RendezvousGet) hold none. Past the thread or memory
  // quota gRPC answers RESOURCE_EXHAUSTED; a larger message is refused with RESOURCE_EXHAUSTED
  // naming both sizes; streams past the limit on one connection wait for a free one.
  int grpc_max_threads = 256;                    // --grpc_max_threads
  int64_t grpc_memory_bytes = int64_t{1} << 30;  // --grpc_memory_mb
  int grpc_max_concurrent_streams = 100;         // --grpc_max_concurrent_streams (per connection)
  int grpc_max_receive_message_bytes = 4 << 20;  // --grpc_max_receive_message_bytes
  // Passed to the core (docs/security.md, "Resource bounds").
  RendezvousStore::Limits rendezvous_limits;  // --rendezvous_max_{keys,bytes}_per_namespace
  int max_events_per_job = 1000;              // --max_events_per_job
  int max_list_page_size = 1000;              // --max_list_page_size
  absl::Duration finished_job_ttl = absl::Hours(24 * 7);  // --finished_job_ttl_s
  int max_finished_jobs = 1000;                           // --max_finished_jobs
  int max_checkpoints_per_job = 100;                      // --max_checkpoints_per_job
  int max_world_size = 0;                                 // --max_world_size (placeable.h)
  UserQuotas quotas;  // --max_pending_jobs_per_user ... --max_reason_bytes (user_quota.h)
  // Passed to the core (spec::Validate in the binary).
  std::function<absl::Status(const JobSpec&)> validate_spec;
};

class CoordinatorServer {
 public:
  // Errors: FAILED_PRECONDITION for a non-loopback address without tokens and without
  // `insecure`, or with users but no worker token of its own, and for a users file without a
  // worker token, and for a non-loopback dashboard without users and without `insecure`; the
  // users file's errors (UserTable::Create); INVALID_ARGUMENT for a gRPC bound below 1, and from
  // the core; UNAVAILABLE from the core and when the port cannot be bound.
  static absl::StatusOr<std::unique_ptr<CoordinatorServer>> Create(const ServerOptions& options);
  ~CoordinatorServer();

  // "host:port" actually bound.
  const std::string& address() const { return address_; }
  // "host:port" of the metrics endpoint; empty when off.
  std::string metrics_address() const { return metrics_ ? metrics_->address() : ""; }
  // "host:port" of the dashboard; empty when off.
  std::string dashboard_address() const { return dashboard_ ? dashboard_->address() : ""; }
  CoordinatorCore* core() { return core_.get(); }

  // Blocks until Shutdown().
  void Wait();
  // Stops accepting calls, ends open streams, stops the tick thread. Idempotent.
  void Shutdown();

 private:
  CoordinatorServer() = default;
  // The steps of Create, in order: the gRPC port (with the service and the health service), the
  // /metrics endpoint and the dashboard (each only when its address is set); then the tick thread
  // runs TickLoop (core ticks, users file reloads) until Shutdown().
  absl::Status StartGrpc(const ServerOptions& options);
  absl::Status StartMetrics(const ServerOptions& options);
  absl::Status StartDashboard(const ServerOptions& options);
  void TickLoop();

  RealClock clock_;
  std::unique_ptr<CoordinatorCore> core_;
  std::shared_ptr<UserTable> users_;
  std::unique_ptr<CoordinatorService> service_;
  CoordinatorMetrics prometheus_;  // RPC counts (its interceptor) and the /metrics text
  std::unique_ptr<MetricsHttpServer> metrics_;
  std::unique_ptr<dashboard::DashboardServer> dashboard_;  // reads core_
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  absl::Duration tick_;
  absl::Notification stop_;
  std::thread ticker_;
  std::once_flag shutdown_once_;
};

}  // namespace shardline::coordinator

#endif  // SHARDLINE_COORDINATOR_SERVER_H_
