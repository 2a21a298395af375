#include "coordinator/metrics.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace shardline::coordinator {
namespace {

const char* CodeName(int code) {
  static const char* const kNames[] = {"OK",
                                       "CANCELLED",
                                       "UNKNOWN",
                                       "INVALID_ARGUMENT",
                                       "DEADLINE_EXCEEDED",
                                       "NOT_FOUND",
                                       "ALREADY_EXISTS",
                                       "PERMISSION_DENIED",
                                       "RESOURCE_EXHAUSTED",
                                       "FAILED_PRECONDITION",
                                       "ABORTED",
                                       "OUT_OF_RANGE",
                                       "UNIMPLEMENTED",
                                       "INTERNAL",
                                       "UNAVAILABLE",
                                       "DATA_LOSS",
                                       "UNAUTHENTICATED"};
  return code >= 0 && code <= 16 ? kNames[code] : "UNKNOWN";
}

class MetricsInterceptor : public grpc::experimental::Interceptor {
 public:
  MetricsInterceptor(grpc::experimental::ServerRpcInfo* info, RpcMetrics* metrics)
      : metrics_(metrics), start_(absl::Now()) {
    absl::string_view m = info->method() ? info->method() : "unknown";
    const size_t slash = m.rfind('/');
    method_ = std::string(slash == absl::string_view::npos ? m : m.substr(slash + 1));
  }
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS)) {
      metrics_->Observe(method_, methods->GetSendStatus().error_code(), absl::Now() - start_);
    }
    methods->Proceed();
  }

 private:
  RpcMetrics* metrics_;
  std::string method_;
  absl::Time start_;
};

class MetricsInterceptorFactory : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit MetricsInterceptorFactory(RpcMetrics* metrics) : metrics_(metrics) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new MetricsInterceptor(info, metrics_);
  }

 private:
  RpcMetrics* metrics_;
};

}  // namespace

void RpcMetrics::Observe(absl::string_view method, int code, absl::Duration latency) {
  const double s = absl::ToDoubleSeconds(latency);
  absl::MutexLock lock(&mu_);
  calls_[{std::string(method), code}]++;
  Histogram& h = latency_[std::string(method)];
  const size_t b = std::lower_bound(kBuckets.begin(), kBuckets.end(), s) - kBuckets.begin();
  if (b < kBuckets.size()) h.buckets[b]++;
  h.count++;
  h.sum += s;
}

void RpcMetrics::Render(std::string* out) const {
  absl::MutexLock lock(&mu_);
  absl::StrAppend(out,
                  "# HELP shardline_rpc_total RPCs served, by method and status code.\n"
                  "# TYPE shardline_rpc_total counter\n");
  for (const auto& [key, n] : calls_) {
    absl::StrAppend(out, "shardline_rpc_total{method=\"", key.first, "\",code=\"",
                    CodeName(key.second), "\"} ", n, "\n");
  }
  absl::StrAppend(out,
                  "# HELP shardline_rpc_latency_seconds Time from call start to status (streams: "
                  "their lifetime).\n"
                  "# TYPE shardline_rpc_latency_seconds histogram\n");
  for (const auto& [method, h] : latency_) {
    uint64_t cumulative = 0;
    for (size_t i = 0; i < kBuckets.size(); ++i) {
      cumulative += h.buckets[i];
      absl::StrAppend(out, "shardline_rpc_latency_seconds_bucket{method=\"", method, "\",le=\"",
                      kBuckets[i], "\"} ", cumulative, "\n");
    }
    absl::StrAppend(out, "shardline_rpc_latency_seconds_bucket{method=\"", method,
                    "\",le=\"+Inf\"} ", h.count, "\n");
    absl::StrAppend(out, "shardline_rpc_latency_seconds_sum{method=\"", method, "\"} ",
                    absl::StrFormat("%.6f", h.sum), "\n");
    absl::StrAppend(out, "shardline_rpc_latency_seconds_count{method=\"", method, "\"} ", h.count,
                    "\n");
  }
}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> MakeMetricsInterceptor(
    RpcMetrics* metrics) {
  return std::make_unique<MetricsInterceptorFactory>(metrics);
}

std::string RenderMetrics(const CoordinatorCore& core, const RpcMetrics& rpcs) {
  const CoordinatorCore::Counters c = core.counters();
  std::string out;
  absl::StrAppend(&out,
                  "# HELP shardline_jobs Jobs by state.\n"
                  "# TYPE shardline_jobs gauge\n");
  for (JobState s : {PENDING, RUNNING, SUCCEEDED, FAILED, CANCELLED}) {
    auto it = c.jobs_by_state.find(s);
    absl::StrAppend(&out, "shardline_jobs{state=\"", JobState_Name(s), "\"} ",
                    it == c.jobs_by_state.end() ? 0 : it->second, "\n");
  }
  const int64_t now_ms = absl::ToUnixMillis(absl::Now());
  int alive = 0, dead = 0;
  double max_age = 0;
  std::string ages;
  for (const WorkerInfo& w : core.ListWorkers()) {
    if (w.state() != WorkerInfo::ALIVE) {
      ++dead;
      continue;
    }
    ++alive;
    const double age = std::max<int64_t>(0, now_ms - w.last_heartbeat_unix_ms()) / 1000.0;
    max_age = std::max(max_age, age);
    absl::StrAppend(&ages, "shardline_worker_heartbeat_age_seconds{worker=\"", w.worker_id(),
                    "\",node=\"", w.node_name(), "\"} ", absl::StrFormat("%.3f", age), "\n");
  }
  absl::StrAppend(&out,
                  "# HELP shardline_workers Registered workers by liveness.\n"
                  "# TYPE shardline_workers gauge\n"
                  "shardline_workers{state=\"ALIVE\"} ",
                  alive, "\n", "shardline_workers{state=\"DEAD\"} ", dead, "\n");
  absl::StrAppend(&out,
                  "# HELP shardline_worker_heartbeat_age_seconds Time since each live worker's "
                  "last heartbeat.\n"
                  "# TYPE shardline_worker_heartbeat_age_seconds gauge\n",
                  ages,
                  "# HELP shardline_worker_heartbeat_age_max_seconds Oldest heartbeat among live "
                  "workers.\n"
                  "# TYPE shardline_worker_heartbeat_age_max_seconds gauge\n"
                  "shardline_worker_heartbeat_age_max_seconds ",
                  absl::StrFormat("%.3f", max_age), "\n");
  absl::StrAppend(&out,
                  "# HELP shardline_attempts_started_total Job attempts placed.\n"
                  "# TYPE shardline_attempts_started_total counter\n"
                  "shardline_attempts_started_total ",
                  c.attempts_started, "\n",
                  "# HELP shardline_attempts_failed_total Job attempts that failed.\n"
                  "# TYPE shardline_attempts_failed_total counter\n"
                  "shardline_attempts_failed_total ",
                  c.attempts_failed, "\n",
                  "# HELP shardline_restarts_total Failed attempts that restarted.\n"
                  "# TYPE shardline_restarts_total counter\n"
                  "shardline_restarts_total ",
                  c.restarts, "\n");
  rpcs.Render(&out);
  return out;
}

}  // namespace shardline::coordinator
