// coordinator: the Shardline cluster service. Prints "listening on HOST:PORT" on stdout once
// it serves (tests and `shardctl` read that line), then logs to stderr until SIGINT/SIGTERM.
//
//   coordinator --listen 0.0.0.0:7070 --state_dir /var/lib/shardline
//       --users_file /etc/shardline/users --worker_token_file /etc/shardline/join.token
#include <signal.h>
#include <algorithm>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/secret_file.h"
#include "common/status_macros.h"
#include "coordinator/auth/user_table.h"
#include "coordinator/server.h"
#include "spec/path_policy.h"
#include "spec/validate.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:0",
          "host:port to serve on (port 0: any free port; the bound one is printed)");
ABSL_FLAG(std::string, state_dir, "",
          "directory of the SQLite state (jobs, events, checkpoints, workers); empty: memory "
          "only, nothing survives a restart");
ABSL_FLAG(int32_t, heartbeat_interval_ms, 2000, "how often workers are told to heartbeat");
ABSL_FLAG(int32_t, heartbeat_timeout_ms, 10000, "a worker silent this long is dead");
ABSL_FLAG(int32_t, tick_ms, 200, "period of liveness checks and scheduling");
ABSL_FLAG(int32_t, rank_start_timeout_ms, 120000,
          "a rank not reported by its worker this long after its attempt started fails it");
ABSL_FLAG(int32_t, stop_grace_s, 10,
          "seconds between SIGTERM and SIGKILL when ranks stop; a cancelled job's ranks are gone "
          "within this plus 2 s");
ABSL_FLAG(int32_t, preempt_timeout_s, 300,
          "a job preempted for a higher-priority one that commits no checkpoint this long after it "
          "was asked is stopped anyway and resumes from its last committed checkpoint");
ABSL_FLAG(std::string, token, "",
          "bearer token of the admin user \"admin\" (prefer --token_file or --users_file)");
ABSL_FLAG(std::string, token_file, "",
          "file holding the token of the admin user \"admin\" (mode 0600)");
ABSL_FLAG(std::string, users_file, "",
          "named users, one a line: <name> <token> [admin] [max_running_ranks=N] "
          "[max_pending_jobs=N] (# comments; the two bounds replace the flags' for that user); "
          "mode 0600 or stricter; reloaded when it changes (a bad edit keeps the old users)");
ABSL_FLAG(std::string, worker_token, "",
          "join token worker daemons must send (trainers get per-attempt credentials instead); "
          "required off loopback and with --users_file, and must differ from every user token; "
          "on loopback it defaults to --token");
ABSL_FLAG(std::string, worker_token_file, "", "file holding the worker join token (mode 0600)");
ABSL_FLAG(std::string, metrics_listen, "",
          "host:port for the Prometheus endpoint GET /metrics (empty: off; port 0: any, printed "
          "as \"metrics on HOST:PORT\")");
ABSL_FLAG(std::string, dashboard_listen, "",
          "host:port for the web dashboard (empty: off; port 0: any, printed as \"dashboard on "
          "http://HOST:PORT/\", https with --tls_cert); same users as the API: sign in at /login "
          "(off loopback it needs --tls_cert, or --insecure for plain HTTP)");
ABSL_FLAG(int32_t, dashboard_session_idle_timeout_s, 3600,
          "a dashboard sign-in ends after this many seconds without a request");
ABSL_FLAG(int32_t, dashboard_session_lifetime_s, 12 * 3600,
          "a dashboard sign-in ends this many seconds after the login, used or not");
ABSL_FLAG(int32_t, dashboard_max_sessions, 1000,
          "dashboard sign-ins kept; a login beyond that ends the oldest");
ABSL_FLAG(std::vector<std::string>, dashboard_host, {},
          "comma-separated names (or name:port) browsers reach the dashboard by besides its "
          "listen address (a DNS name, a reverse proxy's); requests naming another Host get 421");
ABSL_FLAG(int32_t, dashboard_threads, 4, "threads serving the dashboard concurrently");
ABSL_FLAG(std::string, dashboard_chart_js, "/usr/share/javascript/chart.js/chart.min.js",
          "chart.js file the dashboard serves (Debian's libjs-chart.js)");
ABSL_FLAG(int32_t, metrics_flush_ms, 5000,
          "a job's training series and its progress (step, loss) are written to the state dir "
          "at most this often (and at a clean shutdown); state changes, events and checkpoints "
          "are written at once");
ABSL_FLAG(
    int32_t, metrics_points, 2048,
    "points a job's training series keeps before adjacent pairs merge (docs/observability.md)");
ABSL_FLAG(int32_t, log_ring_kib_per_rank, 1024, "newest log KiB kept per rank in memory");
ABSL_FLAG(int32_t, log_ring_total_mib, 256,
          "log MiB kept in memory in all; past it the least recently written job's logs go");
ABSL_FLAG(std::string, read_roots, "",
          "comma-separated directories job specs may read data, models and weights under "
          "(empty: anywhere; see spec/path_policy.h)");
ABSL_FLAG(std::string, checkpoint_roots, "",
          "comma-separated directories a job's checkpoint.dir must lie under (empty: anywhere)");
ABSL_FLAG(int64_t, rendezvous_max_keys_per_namespace, 65536,
          "keys one job attempt's rendezvous namespace may hold");
ABSL_FLAG(int64_t, rendezvous_max_bytes_per_namespace, 64 << 20,
          "bytes (keys plus values) one job attempt's rendezvous namespace may hold");
ABSL_FLAG(int64_t, rendezvous_max_response_bytes, 8 << 20,
          "bytes of values one rendezvous get may return");
ABSL_FLAG(int32_t, max_events_per_job, 1000,
          "events kept per job (the newest; older ones are counted as dropped in its status)");
ABSL_FLAG(int64_t, finished_job_ttl_s, 7 * 24 * 3600,
          "a finished job (and its checkpoint records) is forgotten this long after it finished "
          "(0: kept)");
ABSL_FLAG(int32_t, max_finished_jobs, 1000,
          "finished jobs kept; the oldest finished beyond it are forgotten (0: no bound)");
ABSL_FLAG(int32_t, max_list_page_size, 1000, "largest page_size a ListJobs request may ask for");
ABSL_FLAG(int32_t, max_world_size, 0,
          "SubmitJob refuses a job needing more ranks than this (elastic.min_world_size when "
          "set); 0: the slots of its kind on the workers alive now (once any is alive); -1: no "
          "bound. Set N for a cluster that grows (autoscaling)");
ABSL_FLAG(int32_t, max_checkpoints_per_job, 100,
          "checkpoint records kept per job (at least 2): the oldest committed beyond it, and "
          "uncommitted ones a later commit overtook, are forgotten; never the newest committed");
ABSL_FLAG(int32_t, max_pending_jobs_per_user, 1000,
          "PENDING jobs one user may have; a submit past it is refused (0: no bound; a user's "
          "max_pending_jobs in --users_file replaces it for that user)");
ABSL_FLAG(int32_t, max_running_ranks_per_user, 0,
          "ranks one user's RUNNING jobs may hold at once; a job past it waits, and one with a "
          "larger world_size is refused at submit (0: no bound; a user's max_running_ranks in "
          "--users_file replaces it for that user)");
ABSL_FLAG(int64_t, max_spec_bytes_per_job, 1 << 20,
          "serialized bytes of one job spec; a larger one is refused (0: no bound)");
ABSL_FLAG(int64_t, max_spec_bytes_per_user, int64_t{64} << 20,
          "serialized spec bytes one user's PENDING and RUNNING jobs may hold (0: no bound)");
ABSL_FLAG(int32_t, max_reason_bytes, 4096,
          "bytes of a free-text field a user sends (a cancel reason) (0: no bound)");
ABSL_FLAG(int32_t, metrics_threads, 4, "threads serving the metrics endpoint concurrently");
ABSL_FLAG(std::string, metrics_token_file, "",
          "file holding the token a scrape of /metrics must send as \"Authorization: Bearer\" "
          "(mode 0600); user tokens work too. Off loopback a scrape always needs one of them; "
          "on loopback only when this is set");
ABSL_FLAG(int32_t, metrics_max_queued_connections, 64,
          "connections to the metrics endpoint (and the dashboard) that wait for a busy thread; "
          "more are answered 503 at once");
ABSL_FLAG(int32_t, metrics_request_timeout_ms, 5000,
          "a metrics request must arrive whole, and its response be read, within this long");
ABSL_FLAG(int32_t, grpc_max_threads, 256,
          "gRPC resource quota: threads for unary calls (streams and waits hold none)");
ABSL_FLAG(int32_t, grpc_memory_mb, 1024, "gRPC resource quota: memory for calls in flight (MiB)");
ABSL_FLAG(int32_t, grpc_max_concurrent_streams, 100, "concurrent calls on one client connection");
ABSL_FLAG(int32_t, grpc_max_receive_message_bytes, 4 << 20,
          "largest request message accepted (RESOURCE_EXHAUSTED past it)");
ABSL_FLAG(std::string, tls_cert, "", "PEM certificate (chain) file: serve TLS");
ABSL_FLAG(std::string, tls_key, "", "PEM private key file of --tls_cert");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM CA file: require worker daemons to present a client certificate it signed, naming "
          "their --node_name (mutual TLS)");
ABSL_FLAG(bool, check_flags, false,
          "parse and check the flags (token and TLS files readable), then exit 0 (deploy tests)");
ABSL_FLAG(bool, insecure, false,
          "allow a non-loopback --listen without tokens (plain text; trusted networks only)");

namespace {

// The flag's value, or the first line of the file flag's file (which only its owner may read).
absl::StatusOr<std::string> Token(const std::string& value, const std::string& file,
                                  const char* name) {
  if (!value.empty() && !file.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("give --", name, " or --", name, "_file, not both"));
  }
  if (file.empty()) return value;
  return shardline::ReadTokenFile(file, absl::StrCat("--", name, "_file"));
}

absl::StatusOr<std::string> ReadPem(const std::string& path, const char* flag) {
  if (path.empty()) return std::string();
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("--", flag, ": cannot read ", path));
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The tokens and PEM files the flags name.
absl::Status ReadSecrets(shardline::coordinator::ServerOptions& o) {
  ASSIGN_OR_RETURN(o.user_token,
                   Token(absl::GetFlag(FLAGS_token), absl::GetFlag(FLAGS_token_file), "token"));
  ASSIGN_OR_RETURN(o.worker_token, Token(absl::GetFlag(FLAGS_worker_token),
                                         absl::GetFlag(FLAGS_worker_token_file), "worker_token"));
  ASSIGN_OR_RETURN(o.metrics_token,
                   Token("", absl::GetFlag(FLAGS_metrics_token_file), "metrics_token"));
  ASSIGN_OR_RETURN(o.tls_cert_pem, ReadPem(absl::GetFlag(FLAGS_tls_cert), "tls_cert"));
  ASSIGN_OR_RETURN(o.tls_key_pem, ReadPem(absl::GetFlag(FLAGS_tls_key), "tls_key"));
  ASSIGN_OR_RETURN(o.tls_client_ca_pem,
                   ReadPem(absl::GetFlag(FLAGS_tls_client_ca), "tls_client_ca"));
  return absl::OkStatus();
}

// The resource bounds (docs/security.md, "Resource bounds").
void SetLimits(shardline::coordinator::ServerOptions& o) {
  o.logs.bytes_per_rank = int64_t{std::max(1, absl::GetFlag(FLAGS_log_ring_kib_per_rank))} << 10;
  o.logs.max_total_bytes = int64_t{std::max(1, absl::GetFlag(FLAGS_log_ring_total_mib))} << 20;
  o.rendezvous_limits.max_keys_per_namespace =
      std::max<int64_t>(0, absl::GetFlag(FLAGS_rendezvous_max_keys_per_namespace));
  o.rendezvous_limits.max_bytes_per_namespace =
      std::max<int64_t>(0, absl::GetFlag(FLAGS_rendezvous_max_bytes_per_namespace));
  o.rendezvous_limits.max_response_bytes =
      std::max<int64_t>(0, absl::GetFlag(FLAGS_rendezvous_max_response_bytes));
  o.max_events_per_job = absl::GetFlag(FLAGS_max_events_per_job);
  o.max_list_page_size = absl::GetFlag(FLAGS_max_list_page_size);
  o.finished_job_ttl = absl::Seconds(absl::GetFlag(FLAGS_finished_job_ttl_s));
  o.max_finished_jobs = absl::GetFlag(FLAGS_max_finished_jobs);
  o.max_checkpoints_per_job = absl::GetFlag(FLAGS_max_checkpoints_per_job);
  o.max_world_size = absl::GetFlag(FLAGS_max_world_size);
  o.quotas.max_pending_jobs_per_user = absl::GetFlag(FLAGS_max_pending_jobs_per_user);
  o.quotas.max_running_ranks_per_user = absl::GetFlag(FLAGS_max_running_ranks_per_user);
  o.quotas.max_spec_bytes_per_job = absl::GetFlag(FLAGS_max_spec_bytes_per_job);
  o.quotas.max_spec_bytes_per_user = absl::GetFlag(FLAGS_max_spec_bytes_per_user);
  o.quotas.max_reason_bytes = absl::GetFlag(FLAGS_max_reason_bytes);
  o.grpc_max_threads = absl::GetFlag(FLAGS_grpc_max_threads);
  o.grpc_memory_bytes = int64_t{absl::GetFlag(FLAGS_grpc_memory_mb)} << 20;
  o.grpc_max_concurrent_streams = absl::GetFlag(FLAGS_grpc_max_concurrent_streams);
  o.grpc_max_receive_message_bytes = absl::GetFlag(FLAGS_grpc_max_receive_message_bytes);
}

// The HTTP endpoints: /metrics and the dashboard share the request bounds.
void SetHttp(shardline::coordinator::ServerOptions& o) {
  o.metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  o.metrics.threads = absl::GetFlag(FLAGS_metrics_threads);
  o.metrics.max_queued = absl::GetFlag(FLAGS_metrics_max_queued_connections);
  o.metrics.request_timeout = absl::Milliseconds(absl::GetFlag(FLAGS_metrics_request_timeout_ms));
  o.metrics.write_timeout = o.metrics.request_timeout;
  o.dashboard_listen = absl::GetFlag(FLAGS_dashboard_listen);
  o.dashboard.http.threads = absl::GetFlag(FLAGS_dashboard_threads);
  o.dashboard.http.request_timeout = o.metrics.request_timeout;
  o.dashboard.http.max_queued = o.metrics.max_queued;
  o.dashboard.http.write_timeout = o.metrics.write_timeout;
  o.dashboard.chart_js_path = absl::GetFlag(FLAGS_dashboard_chart_js);
  o.dashboard.sessions.idle_timeout =
      absl::Seconds(absl::GetFlag(FLAGS_dashboard_session_idle_timeout_s));
  o.dashboard.sessions.lifetime = absl::Seconds(absl::GetFlag(FLAGS_dashboard_session_lifetime_s));
  o.dashboard.sessions.max_sessions = absl::GetFlag(FLAGS_dashboard_max_sessions);
  o.dashboard.hosts = absl::GetFlag(FLAGS_dashboard_host);
}

// spec::Validate without the file checks (the data lives on the workers' file systems), then the
// path policy of --read_roots / --checkpoint_roots.
absl::Status SetSpecValidator(shardline::coordinator::ServerOptions& o) {
  shardline::spec::PathPolicy paths;
  ASSIGN_OR_RETURN(paths.read_roots,
                   shardline::spec::ParseRoots("read_roots", absl::GetFlag(FLAGS_read_roots)));
  ASSIGN_OR_RETURN(
      paths.checkpoint_roots,
      shardline::spec::ParseRoots("checkpoint_roots", absl::GetFlag(FLAGS_checkpoint_roots)));
  o.validate_spec = [paths](const shardline::JobSpec& spec) {
    shardline::spec::ValidateOptions v;
    v.check_files = false;
    RETURN_IF_ERROR(shardline::spec::Validate(spec, v));
    // Lexical only: the workers check again with their file systems (symbolic links).
    return shardline::spec::CheckSpecPaths(spec, paths, /*resolve_links=*/false);
  };
  return absl::OkStatus();
}

absl::StatusOr<shardline::coordinator::ServerOptions> OptionsFromFlags() {
  shardline::coordinator::ServerOptions o;
  o.listen = absl::GetFlag(FLAGS_listen);
  o.state_dir = absl::GetFlag(FLAGS_state_dir);
  o.heartbeat_interval = absl::Milliseconds(absl::GetFlag(FLAGS_heartbeat_interval_ms));
  o.heartbeat_timeout = absl::Milliseconds(absl::GetFlag(FLAGS_heartbeat_timeout_ms));
  o.tick = absl::Milliseconds(absl::GetFlag(FLAGS_tick_ms));
  o.stop_grace_period_s = absl::GetFlag(FLAGS_stop_grace_s);
  o.rank_start_timeout = absl::Milliseconds(absl::GetFlag(FLAGS_rank_start_timeout_ms));
  o.preempt_timeout = absl::Seconds(std::max(1, absl::GetFlag(FLAGS_preempt_timeout_s)));
  o.users_file = absl::GetFlag(FLAGS_users_file);
  o.insecure = absl::GetFlag(FLAGS_insecure);
  o.metrics_flush_interval = absl::Milliseconds(std::max(0, absl::GetFlag(FLAGS_metrics_flush_ms)));
  o.metrics_series_capacity = std::max(2, absl::GetFlag(FLAGS_metrics_points));
  RETURN_IF_ERROR(ReadSecrets(o));  // worker_token empty on loopback: --token (CoordinatorServer)
  SetLimits(o);
  SetHttp(o);
  RETURN_IF_ERROR(SetSpecValidator(o));
  return o;
}

// Prints the addresses (the "listening on" line last: readers may stop reading at it) and serves
// until SIGINT or SIGTERM.
int Serve(const shardline::coordinator::ServerOptions& o, const sigset_t& signals) {
  auto server = shardline::coordinator::CoordinatorServer::Create(o);
  if (!server.ok()) {
    SL_LOG(ERROR) << "cannot start: " << server.status();
    return 1;
  }
  if (!(*server)->metrics_address().empty()) {
    std::cout << "metrics on " << (*server)->metrics_address() << std::endl;
  }
  if (!(*server)->dashboard_address().empty()) {
    std::cout << "dashboard on " << (o.tls_cert_pem.empty() ? "http" : "https") << "://"
              << (*server)->dashboard_address() << "/" << std::endl;
  }
  std::cout << "listening on " << (*server)->address() << std::endl;
  SL_LOG(INFO) << "serving on " << (*server)->address()
               << (o.user_token.empty() && o.users_file.empty() ? " (no user token)" : "")
               << (o.state_dir.empty() ? "" : absl::StrCat(", state in ", o.state_dir));

  shardline::coordinator::CoordinatorServer* s = server->get();
  std::thread waiter([s, signals] {
    int sig = 0;
    sigwait(&signals, &sig);
    SL_LOG(INFO) << "signal " << sig << ": shutting down";
    s->Shutdown();
  });
  waiter.detach();
  s->Wait();
  server->reset();
  SL_LOG(INFO) << "stopped";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  shardline::SetLogPrefix("coordinator");

  // Signals go to one waiting thread, not to whichever thread gRPC happens to run.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  absl::StatusOr<shardline::coordinator::ServerOptions> o = OptionsFromFlags();
  if (!o.ok()) {
    SL_LOG(ERROR) << o.status();
    return 2;
  }
  if (absl::GetFlag(FLAGS_check_flags)) {
    auto users = shardline::coordinator::UserTable::Create(o->users_file, o->user_token);
    if (!users.ok()) {
      SL_LOG(ERROR) << users.status();
      return 2;
    }
    return 0;
  }
  if (o->state_dir.empty()) {
    SL_LOG(WARNING) << "no --state_dir: state is kept in memory and lost on exit";
  }
  return Serve(*o, signals);
}
