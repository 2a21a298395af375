// The coordinator's Prometheus metrics, kept in a prometheus-cpp Registry and rendered by its
// TextSerializer (text format 0.0.4).
//
//   RPCs        shardline_rpc_total{method,code} (counter) and shardline_rpc_latency_seconds
//               {method} (histogram), fed live by a gRPC server interceptor, so refused and failed
//               calls count too; a method the server does not serve counts as
//               method="unknown" (a client may send any path: one series per name would let it
//               grow the exposition, and the coordinator's memory, without end);
//   the core    read at each scrape: jobs by state, workers alive and dead, heartbeat ages,
//               attempts, failures and restarts, and per running job (labels job, name) its latest
//               step, loss, tokens/s, MFU, step time, ETA and per-rank peak memory (labels job,
//               rank). The label sets of a job that stopped running, or of a worker that is no
//               longer alive, are removed from their families at the next scrape (SyncedGauges).
//
// Thread safety: ObserveRpc and Render may be called from any thread; scrapes are serialised.
#ifndef SHARDLINE_COORDINATOR_HTTP_METRICS_H_
#define SHARDLINE_COORDINATOR_HTTP_METRICS_H_

#include <array>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <grpcpp/support/server_interceptor.h>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/core/coordinator_core.h"
#include "coordinator/http/synced_gauges.h"

namespace shardline::coordinator {

class CoordinatorMetrics {
 public:
  static constexpr std::array<double, 14> kRpcBuckets = {
      0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};

  CoordinatorMetrics();
  CoordinatorMetrics(const CoordinatorMetrics&) = delete;
  CoordinatorMetrics& operator=(const CoordinatorMetrics&) = delete;

  // The label of a call to `path` ("/shardline.Coordinator/Heartbeat" -> "Heartbeat"): the method
  // name for the Coordinator and health services' methods, kUnknownMethod for any other path.
  static constexpr char kUnknownMethod[] = "unknown";
  static std::string MethodLabel(absl::string_view path);

  // One finished call. `method` is a MethodLabel ("Heartbeat"; any other name counts as
  // kUnknownMethod); `code` a grpc::StatusCode.
  void ObserveRpc(absl::string_view method, int code, absl::Duration latency)
      ABSL_LOCKS_EXCLUDED(rpc_mu_);

  // Reads `core` into the gauges and returns the whole exposition text.
  std::string Render(const CoordinatorCore& core) ABSL_LOCKS_EXCLUDED(render_mu_);

 private:
  void UpdateFromCoreLocked(const CoordinatorCore& core) ABSL_EXCLUSIVE_LOCKS_REQUIRED(render_mu_);

  const std::shared_ptr<prometheus::Registry> registry_;

  prometheus::Family<prometheus::Counter>& rpc_total_;
  prometheus::Family<prometheus::Histogram>& rpc_latency_;
  absl::Mutex rpc_mu_;
  // The families' own lookup builds and hashes a label map per call: these skip it.
  absl::flat_hash_map<std::pair<std::string, int>, prometheus::Counter*> rpc_calls_
      ABSL_GUARDED_BY(rpc_mu_);
  absl::flat_hash_map<std::string, prometheus::Histogram*> rpc_latency_by_method_
      ABSL_GUARDED_BY(rpc_mu_);

  absl::Mutex render_mu_;
  SyncedGauges jobs_ ABSL_GUARDED_BY(render_mu_);
  SyncedGauges workers_ ABSL_GUARDED_BY(render_mu_);
  SyncedGauges heartbeat_age_ ABSL_GUARDED_BY(render_mu_);
  SyncedGauges heartbeat_age_max_ ABSL_GUARDED_BY(render_mu_);
  // The core's own totals, mirrored: each scrape adds what the core counted since the last.
  prometheus::Counter& attempts_started_;
  prometheus::Counter& attempts_failed_;
  prometheus::Counter& restarts_;
  prometheus::Counter& preemptions_;
  // One per entry of the per-job gauge table (metrics.cc), in its order.
  std::vector<std::unique_ptr<SyncedGauges>> job_gauges_ ABSL_GUARDED_BY(render_mu_);
  SyncedGauges job_peak_memory_ ABSL_GUARDED_BY(render_mu_);
};

// gRPC interceptor factory observing every call of the server it is installed on.
std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> MakeMetricsInterceptor(
    CoordinatorMetrics* metrics);

}  // namespace shardline::coordinator

#endif  // SHARDLINE_COORDINATOR_HTTP_METRICS_H_
