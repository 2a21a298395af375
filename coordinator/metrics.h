// Prometheus text-format metrics of the coordinator.
//
//   RpcMetrics      counts and latency histograms per RPC method and status code, fed by a gRPC
//                   server interceptor (so refused and failed calls count too);
//   RenderMetrics   the whole exposition: RPCs plus the core's jobs by state, workers alive and
//                   dead, heartbeat ages, attempts, failures and restarts, and per running job
//                   (labels job, name) its latest step, loss, tokens/s, MFU, step time, ETA and
//                   per-rank peak memory.
//
// Thread safety: RpcMetrics may be fed and rendered from any thread.
#ifndef SHARDLINE_COORDINATOR_METRICS_H_
#define SHARDLINE_COORDINATOR_METRICS_H_

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <grpcpp/support/server_interceptor.h>

#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/coordinator_core.h"

namespace shardline::coordinator {

class RpcMetrics {
 public:
  static constexpr std::array<double, 14> kBuckets = {
      0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
  // `method` is the last path component ("Heartbeat"); `code` a grpc::StatusCode.
  void Observe(absl::string_view method, int code, absl::Duration latency);
  void Render(std::string* out) const;

 private:
  struct Histogram {
    std::array<uint64_t, kBuckets.size()> buckets{};  // non-cumulative
    uint64_t count = 0;
    double sum = 0;
  };
  mutable absl::Mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> calls_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Histogram> latency_ ABSL_GUARDED_BY(mu_);
};

// gRPC interceptor factory observing every call of the server it is installed on.
std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> MakeMetricsInterceptor(
    RpcMetrics* metrics);

// The full exposition text.
std::string RenderMetrics(const CoordinatorCore& core, const RpcMetrics& rpcs);

}  // namespace shardline::coordinator

#endif  // SHARDLINE_COORDINATOR_METRICS_H_
