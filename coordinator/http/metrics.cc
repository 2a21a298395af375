#include "coordinator/http/metrics.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>

#include <prometheus/text_serializer.h>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "proto/coordinator.pb.h"

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

// The "/package.Service/Method" paths this server serves, by the label each counts under: the
// Coordinator service's methods (from its descriptor, so a new RPC is covered without a list to
// keep; ShipLogsRequest is a message of its file) and the health service's.
const absl::flat_hash_map<std::string, std::string>& KnownMethods() {
  static const auto* const known = [] {
    auto* m = new absl::flat_hash_map<std::string, std::string>();
    const google::protobuf::ServiceDescriptor* svc =
        ShipLogsRequest::descriptor()->file()->FindServiceByName("Coordinator");
    for (int i = 0; svc != nullptr && i < svc->method_count(); ++i) {
      const std::string& name = svc->method(i)->name();
      m->emplace(absl::StrCat("/", svc->full_name(), "/", name), name);
    }
    for (const char* name : {"Check", "Watch"}) {
      m->emplace(absl::StrCat("/grpc.health.v1.Health/", name), name);
    }
    return m;
  }();
  return *known;
}

class MetricsInterceptor : public grpc::experimental::Interceptor {
 public:
  MetricsInterceptor(grpc::experimental::ServerRpcInfo* info, CoordinatorMetrics* metrics)
      : metrics_(metrics), start_(absl::Now()) {
    method_ = CoordinatorMetrics::MethodLabel(info->method() ? info->method() : "");
  }
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS)) {
      metrics_->ObserveRpc(method_, methods->GetSendStatus().error_code(), absl::Now() - start_);
    }
    methods->Proceed();
  }

 private:
  CoordinatorMetrics* metrics_;
  std::string method_;
  absl::Time start_;
};

class MetricsInterceptorFactory : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit MetricsInterceptorFactory(CoordinatorMetrics* metrics) : metrics_(metrics) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new MetricsInterceptor(info, metrics_);
  }

 private:
  CoordinatorMetrics* metrics_;
};

// The per-job gauges: name, help and the value of a running job (none: the job has none yet, and
// its label set is left out).
struct JobGauge {
  const char* name;
  const char* help;
  std::function<std::optional<double>(const CoordinatorCore::RunningJobMetrics&)> value;
};

const std::vector<JobGauge>& JobGauges() {
  using Job = CoordinatorCore::RunningJobMetrics;
  static const auto* const kGauges = [] {
    auto reported = [](const Job& j, double v) {
      return j.latest.count() > 0 ? std::optional<double>(v) : std::nullopt;
    };
    return new std::vector<JobGauge>{
        {"shardline_job_step", "Latest optimizer step rank 0 reported, per running job.",
         [](const Job& j) { return std::optional<double>(static_cast<double>(j.step)); }},
        {"shardline_job_total_steps", "Steps the running job trains in all.",
         [](const Job& j) { return std::optional<double>(static_cast<double>(j.total_steps)); }},
        {"shardline_job_loss", "Latest training loss of the running job.",
         [=](const Job& j) { return reported(j, j.latest.loss()); }},
        {"shardline_job_tokens_per_second", "Latest training throughput of the running job.",
         [=](const Job& j) { return reported(j, j.latest.tokens_per_s()); }},
        {"shardline_job_mfu", "Latest model FLOPs utilisation of the running job (0..1).",
         [=](const Job& j) { return reported(j, j.latest.mfu()); }},
        {"shardline_job_step_time_seconds", "Latest step time of the running job.",
         [=](const Job& j) { return reported(j, j.latest.step_time_s()); }},
        {"shardline_job_eta_seconds", "Estimated time left of the running job.",
         [=](const Job& j) { return reported(j, j.eta_s); }},
    };
  }();
  return *kGauges;
}

prometheus::Family<prometheus::Gauge>& GaugeFamily(prometheus::Registry& registry,
                                                   const std::string& name,
                                                   const std::string& help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(registry);
}

prometheus::Counter& UnlabelledCounter(prometheus::Registry& registry, const std::string& name,
                                       const std::string& help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(registry).Add({});
}

std::vector<std::unique_ptr<SyncedGauges>> MakeJobGauges(prometheus::Registry& registry) {
  std::vector<std::unique_ptr<SyncedGauges>> out;
  for (const JobGauge& g : JobGauges()) {
    out.push_back(std::make_unique<SyncedGauges>(GaugeFamily(registry, g.name, g.help)));
  }
  return out;
}

// Brings a counter up to `total`, a count the core keeps (prometheus-cpp counters only add).
void Mirror(prometheus::Counter& counter, double total) {
  const double delta = total - counter.Value();
  if (delta > 0) counter.Increment(delta);
}

}  // namespace

CoordinatorMetrics::CoordinatorMetrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      rpc_total_(prometheus::BuildCounter()
                     .Name("shardline_rpc_total")
                     .Help("RPCs served, by method and status code.")
                     .Register(*registry_)),
      rpc_latency_(prometheus::BuildHistogram()
                       .Name("shardline_rpc_latency_seconds")
                       .Help("Time from call start to status (streams: their lifetime).")
                       .Register(*registry_)),
      jobs_(GaugeFamily(*registry_, "shardline_jobs", "Jobs by state.")),
      workers_(GaugeFamily(*registry_, "shardline_workers", "Registered workers by liveness.")),
      heartbeat_age_(GaugeFamily(*registry_, "shardline_worker_heartbeat_age_seconds",
                                 "Time since each live worker's last heartbeat.")),
      heartbeat_age_max_(GaugeFamily(*registry_, "shardline_worker_heartbeat_age_max_seconds",
                                     "Oldest heartbeat among live workers.")),
      attempts_started_(UnlabelledCounter(*registry_, "shardline_attempts_started_total",
                                          "Job attempts placed.")),
      attempts_failed_(UnlabelledCounter(*registry_, "shardline_attempts_failed_total",
                                         "Job attempts that failed.")),
      restarts_(UnlabelledCounter(*registry_, "shardline_restarts_total",
                                  "Failed attempts that restarted.")),
      preemptions_(UnlabelledCounter(*registry_, "shardline_preemptions_total",
                                     "Attempts requeued for a job of higher priority.")),
      job_gauges_(MakeJobGauges(*registry_)),
      job_peak_memory_(GaugeFamily(*registry_, "shardline_job_peak_memory_bytes",
                                   "Peak memory of each rank of the running job.")) {}

std::string CoordinatorMetrics::MethodLabel(absl::string_view path) {
  const auto& known = KnownMethods();
  auto it = known.find(path);
  return it == known.end() ? kUnknownMethod : it->second;
}

void CoordinatorMetrics::ObserveRpc(absl::string_view method, int code, absl::Duration latency) {
  // Bounded here too, so no caller can add label series beyond the known methods.
  static const auto* const labels = [] {
    auto* set = new absl::flat_hash_set<std::string>{kUnknownMethod};
    for (const auto& [path, label] : KnownMethods()) set->insert(label);
    return set;
  }();
  if (!labels->contains(method)) method = kUnknownMethod;
  prometheus::Counter* calls;
  prometheus::Histogram* histogram;
  {
    absl::MutexLock lock(&rpc_mu_);
    auto c = rpc_calls_.find(std::make_pair(std::string(method), code));
    if (c == rpc_calls_.end()) {
      c = rpc_calls_
              .emplace(std::make_pair(std::string(method), code),
                       &rpc_total_.Add({{"method", std::string(method)}, {"code", CodeName(code)}}))
              .first;
    }
    calls = c->second;
    auto h = rpc_latency_by_method_.find(method);
    if (h == rpc_latency_by_method_.end()) {
      h = rpc_latency_by_method_
              .emplace(std::string(method),
                       &rpc_latency_.Add({{"method", std::string(method)}},
                                         prometheus::Histogram::BucketBoundaries(
                                             kRpcBuckets.begin(), kRpcBuckets.end())))
              .first;
    }
    histogram = h->second;
  }
  // Both are thread-safe on their own (an atomic, a mutex of the histogram's).
  calls->Increment();
  histogram->Observe(absl::ToDoubleSeconds(latency));
}

void CoordinatorMetrics::UpdateFromCoreLocked(const CoordinatorCore& core) {
  const CoordinatorCore::Counters c = core.counters();
  for (JobState s : {PENDING, RUNNING, SUCCEEDED, FAILED, CANCELLED}) {
    auto it = c.jobs_by_state.find(s);
    jobs_.Set({{"state", JobState_Name(s)}},
              it == c.jobs_by_state.end() ? 0 : static_cast<double>(it->second));
  }
  jobs_.RemoveUnset();

  const int64_t now_ms = absl::ToUnixMillis(absl::Now());
  int alive = 0, dead = 0;
  double max_age = 0;
  for (const WorkerInfo& w : core.ListWorkers()) {
    if (w.state() != WorkerInfo::ALIVE) {
      ++dead;
      continue;
    }
    ++alive;
    const double age = std::max<int64_t>(0, now_ms - w.last_heartbeat_unix_ms()) / 1000.0;
    max_age = std::max(max_age, age);
    heartbeat_age_.Set({{"worker", w.worker_id()}, {"node", w.node_name()}}, age);
  }
  heartbeat_age_.RemoveUnset();
  workers_.Set({{"state", "ALIVE"}}, alive);
  workers_.Set({{"state", "DEAD"}}, dead);
  workers_.RemoveUnset();
  heartbeat_age_max_.Set({}, max_age);
  heartbeat_age_max_.RemoveUnset();

  Mirror(attempts_started_, static_cast<double>(c.attempts_started));
  Mirror(attempts_failed_, static_cast<double>(c.attempts_failed));
  Mirror(restarts_, static_cast<double>(c.restarts));
  Mirror(preemptions_, static_cast<double>(c.preemptions));

  const std::vector<CoordinatorCore::RunningJobMetrics> jobs = core.RunningJobs();
  const std::vector<JobGauge>& table = JobGauges();
  for (size_t g = 0; g < table.size(); ++g) {
    for (const auto& j : jobs) {
      const std::optional<double> v = table[g].value(j);
      if (v.has_value()) job_gauges_[g]->Set({{"job", j.job_id}, {"name", j.name}}, *v);
    }
    job_gauges_[g]->RemoveUnset();
  }
  for (const auto& j : jobs) {
    for (size_t r = 0; r < j.per_rank_peak_memory_bytes.size(); ++r) {
      job_peak_memory_.Set({{"job", j.job_id}, {"rank", absl::StrCat(r)}},
                           static_cast<double>(j.per_rank_peak_memory_bytes[r]));
    }
  }
  job_peak_memory_.RemoveUnset();
}

std::string CoordinatorMetrics::Render(const CoordinatorCore& core) {
  absl::MutexLock lock(&render_mu_);
  UpdateFromCoreLocked(core);
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> MakeMetricsInterceptor(
    CoordinatorMetrics* metrics) {
  return std::make_unique<MetricsInterceptorFactory>(metrics);
}

}  // namespace shardline::coordinator
