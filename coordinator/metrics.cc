#include "coordinator/metrics.h"

#include <algorithm>
#include <functional>
#include <optional>
#include <vector>

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

// A label value in the text format: backslash, double quote and newline escaped.
std::string LabelValue(absl::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// Per-job gauges of the running jobs, labelled by job id and spec name.
void RenderJobGauges(const CoordinatorCore& core, std::string* out) {
  const std::vector<CoordinatorCore::RunningJobMetrics> jobs = core.RunningJobs();
  struct Gauge {
    const char* name;
    const char* help;
    std::function<std::optional<double>(const CoordinatorCore::RunningJobMetrics&)> value;
  };
  auto reported = [](const CoordinatorCore::RunningJobMetrics& j) { return j.latest.count() > 0; };
  const Gauge gauges[] = {
      {"shardline_job_step", "Latest optimizer step rank 0 reported, per running job.",
       [](const auto& j) { return std::optional<double>(static_cast<double>(j.step)); }},
      {"shardline_job_total_steps", "Steps the running job trains in all.",
       [](const auto& j) { return std::optional<double>(static_cast<double>(j.total_steps)); }},
      {"shardline_job_loss", "Latest training loss of the running job.",
       [&](const auto& j) {
         return reported(j) ? std::optional<double>(j.latest.loss()) : std::nullopt;
       }},
      {"shardline_job_tokens_per_second", "Latest training throughput of the running job.",
       [&](const auto& j) {
         return reported(j) ? std::optional<double>(j.latest.tokens_per_s()) : std::nullopt;
       }},
      {"shardline_job_mfu", "Latest model FLOPs utilisation of the running job (0..1).",
       [&](const auto& j) {
         return reported(j) ? std::optional<double>(j.latest.mfu()) : std::nullopt;
       }},
      {"shardline_job_step_time_seconds", "Latest step time of the running job.",
       [&](const auto& j) {
         return reported(j) ? std::optional<double>(j.latest.step_time_s()) : std::nullopt;
       }},
      {"shardline_job_eta_seconds", "Estimated time left of the running job.",
       [&](const auto& j) { return reported(j) ? std::optional<double>(j.eta_s) : std::nullopt; }},
  };
  for (const Gauge& g : gauges) {
    absl::StrAppend(out, "# HELP ", g.name, " ", g.help, "\n# TYPE ", g.name, " gauge\n");
    for (const auto& j : jobs) {
      const std::optional<double> v = g.value(j);
      if (!v.has_value()) continue;
      absl::StrAppend(out, g.name, "{job=\"", LabelValue(j.job_id), "\",name=\"",
                      LabelValue(j.name), "\"} ", absl::StrFormat("%.9g", *v), "\n");
    }
  }
  absl::StrAppend(out,
                  "# HELP shardline_job_peak_memory_bytes Peak memory of each rank of the running "
                  "job.\n# TYPE shardline_job_peak_memory_bytes gauge\n");
  for (const auto& j : jobs) {
    for (size_t r = 0; r < j.per_rank_peak_memory_bytes.size(); ++r) {
      absl::StrAppend(out, "shardline_job_peak_memory_bytes{job=\"", LabelValue(j.job_id),
                      "\",rank=\"", r, "\"} ", j.per_rank_peak_memory_bytes[r], "\n");
    }
  }
}

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
  RenderJobGauges(core, &out);
  rpcs.Render(&out);
  return out;
}

}  // namespace shardline::coordinator
